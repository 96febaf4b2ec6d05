-- ARGV from 3: keys of proxies that left the fleet; their leases end with them.
for i = 3, #ARGV do
  local key = ARGV[i]
  for _, id in ipairs(redis.call('SMEMBERS', P .. 'lp:' .. key)) do end_lease(id) end
  redis.call('DEL', P .. 'lp:' .. key)
  local b = redis.call('HGET', P .. 'm:' .. key, 'b')
  redis.call('DEL', P .. 'm:' .. key)
  redis.call('HDEL', P .. 'fleet', key)
  redis.call('HDEL', P .. 'health', key)
  redis.call('HDEL', P .. 'load', key)
  if b then
    redis.call('SREM', P .. 'bm:' .. b, key)
    redis.call('SREM', P .. 'bu:' .. b, key)
    redis.call('SREM', P .. 'bf:' .. b, key)
    redis.call('ZREM', P .. 'bz:' .. b, key)
    if redis.call('SCARD', P .. 'bm:' .. b) == 0 then
      redis.call('DEL', P .. 'bm:' .. b, P .. 'bu:' .. b, P .. 'bf:' .. b, P .. 'bz:' .. b)
      redis.call('HDEL', P .. 'bkt', b)
      redis.call('HDEL', P .. 'bns', b)
      redis.call('HDEL', P .. 'bpool', b)
      redis.call('INCR', P .. 'bver')
    end
  end
end
redis.call('INCR', P .. 'hver')
return redis.call('INCR', P .. 'ver')
