-- ARGV: 3 'namespace/pool', 4.. member keys. Answers the pool's refused-lease count, then
-- for each member its live leases and the targets it is cooling down for now.
sweep()
local out = {redis.call('HGET', P .. 'denied', ARGV[3]) or '0'}
for i = 4, #ARGV do
  local p = ARGV[i]
  out[#out + 1] = load_of(p)
  out[#out + 1] = redis.call('ZCOUNT', P .. 'cz:' .. p, '(' .. fmt(now), '+inf')
end
return out
