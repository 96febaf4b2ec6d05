-- ARGV from 3, in groups of 5: key, leasable ('1' or '0'), latency ms, health JSON, band
-- penalty (as publish's). Keys not in the fleet are skipped.
for i = 3, #ARGV, 5 do
  local key = ARGV[i]
  if redis.call('EXISTS', P .. 'm:' .. key) == 1 then
    redis.call('HSET', P .. 'm:' .. key, 'ok', ARGV[i + 1], 'lat', ARGV[i + 2], 'bp', ARGV[i + 4])
    redis.call('HSET', P .. 'health', key, ARGV[i + 3])
    place(key)
  end
end
return redis.call('INCR', P .. 'hver')
