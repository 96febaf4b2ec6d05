-- ARGV from 3, in groups of 11: key, proxy JSON, bucket id, bucket attributes JSON, most
-- leases, leasable ('1' or '0'), latency ms, health JSON, namespace, 'namespace/pool' ('' : none),
-- band penalty (0 best .. 3 ungraded; 0 for all when the operator does not lease by quality).
for i = 3, #ARGV, 11 do
  local key, pj, b, attrs, max, ok, lat, hj = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7]
  if redis.call('HSETNX', P .. 'bkt', b, attrs) == 1 then
    redis.call('HSET', P .. 'bns', b, ARGV[i + 8])
    if ARGV[i + 9] ~= '' then redis.call('HSET', P .. 'bpool', b, ARGV[i + 9]) end
    redis.call('INCR', P .. 'bver')
  end
  local old = redis.call('HGET', P .. 'm:' .. key, 'b')
  if old and old ~= b then drop_from_bucket(key, old) end
  redis.call('HSET', P .. 'm:' .. key, 'b', b, 'max', max, 'ok', ok, 'lat', lat, 'bp', ARGV[i + 10])
  redis.call('HSET', P .. 'fleet', key, pj)
  redis.call('HSET', P .. 'health', key, hj)
  place(key)
end
redis.call('INCR', P .. 'hver')
return redis.call('INCR', P .. 'ver')
