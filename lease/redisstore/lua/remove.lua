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
  if b then drop_from_bucket(key, b) end
end
redis.call('INCR', P .. 'hver')
return redis.call('INCR', P .. 'ver')
