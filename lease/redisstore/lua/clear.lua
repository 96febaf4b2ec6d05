-- ARGV: 3 proxy, 4 target. Forgets the pair's cooldown, strikes included, from every index;
-- answers 1 when there was one, else 0.
sweep()
local ck = ARGV[3] .. '|' .. ARGV[4]
if redis.call('HEXISTS', P .. 'cool', ck) == 0 then return 0 end
drop_cool(ck)
return 1
