-- ARGV: 3 lease id, 4 result, 5 target, 6 retry-after ms, 7 rate-limited cooldown ms,
-- 8 banned cooldown ms, 9 longest cooldown ms, 10 most cooldowns per proxy (0: no bound),
-- 11 most cooldowns in all (0: no bound).
sweep()
local p = live(ARGV[3])
if not p then return {'notfound'} end
local result, target = ARGV[4], ARGV[5]
if result == 'ok' then return {'ok', p} end
local ra, base, maxcd = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[9])
if result == 'banned' then base = tonumber(ARGV[8]) end
local perProxy, total = tonumber(ARGV[10]), tonumber(ARGV[11])
local ck = p .. '|' .. target
local u, strikes, forget = cooldown(p, target)
local fresh = u == nil
if u == nil or now >= forget then
  u, strikes = 0, 0
end
if fresh then
  -- A new (proxy, target) pair: the bounds keep a flood of distinct targets from growing
  -- the table without end. Forgotten pairs stop counting at once: before refusing, every
  -- one of them is swept, not only the batch each call sweeps.
  local function over()
    if perProxy > 0 and tonumber(redis.call('HGET', P .. 'coolp', p) or '0') >= perProxy then return 'proxy' end
    if total > 0 and redis.call('HLEN', P .. 'cool') >= total then return 'total' end
    return nil
  end
  local scope = over()
  if scope then
    while sweep() > 0 do end
    scope = over()
  end
  if scope then return {'toomany', p, scope} end
  redis.call('HINCRBY', P .. 'coolp', p, 1)
end
strikes = strikes + 1
local d
if result == 'rate_limited' and ra > 0 then
  -- The target said when the proxy may come back: exactly that, never doubled.
  d = math.min(ra, maxcd)
else
  d = base
  local i = 1
  while i < strikes and d < maxcd do
    d = d * 2
    i = i + 1
  end
  if ra > d then d = ra end
  if d > maxcd then d = maxcd end
end
-- A report during a cooldown never shortens it.
if now + d > u then u = now + d end
-- Strikes are remembered for as long again as the cooldown.
forget = u + d
redis.call('HSET', P .. 'cool', ck, fmt(u) .. ':' .. fmt(strikes) .. ':' .. fmt(forget))
redis.call('ZADD', P .. 'cexp', fmt(forget), ck)
-- The proxy's live cooldowns by end, for the pools' view (ZCOUNT from now).
redis.call('ZADD', P .. 'cz:' .. p, fmt(u), target)
return {'cooled', p, fmt(u), strikes}
