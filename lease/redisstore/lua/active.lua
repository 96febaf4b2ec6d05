-- ARGV[3]: 'count' for the number of live leases, else the load of every leased proxy.
sweep()
if ARGV[3] == 'count' then return redis.call('ZCARD', P .. 'exp') end
return redis.call('HGETALL', P .. 'load')
