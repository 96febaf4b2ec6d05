-- ARGV: 3 lease id, 4 ttl ms (0: the lease's last TTL).
sweep()
local id = ARGV[3]
local p = live(id)
if not p then return {'notfound'} end
local l = redis.call('HMGET', P .. 'l:' .. id, 'ttl', 't', 's', 'h')
local ttl = tonumber(ARGV[4])
if ttl == 0 then ttl = tonumber(l[1]) end
local exp = now + ttl
redis.call('HSET', P .. 'l:' .. id, 'ttl', fmt(ttl), 'exp', fmt(exp))
redis.call('ZADD', P .. 'exp', fmt(exp), id)
if l[4] then redis.call('ZADD', P .. 'hl:' .. l[4], fmt(exp), id) end
return {'ok', p, load_of(p), fmt(exp), l[2], l[3], redis.call('HGET', P .. 'fleet', p) or '', redis.call('HGET', P .. 'health', p) or ''}
