-- ARGV: 3 lease id, 4 result, 5 target, 6 retry-after ms, 7 rate-limited cooldown ms,
-- 8 banned cooldown ms, 9 longest cooldown ms, 10 most cooldowns per proxy (0: no bound),
-- 11 most cooldowns in all (0: no bound), 12 most cooldowns per namespace (0: no bound).
sweep()
local p = live(ARGV[3])
if not p then return {'notfound'} end
local result, target = ARGV[4], ARGV[5]
if result == 'ok' then
  -- A success through the proxy forgives one strike of a remembered pair (decision 0261).
  local cu, cs, cf = cooldown(p, target)
  if cu ~= nil and now < cf and cs > 0 then
    redis.call('HSET', P .. 'cool', p .. '|' .. target, fmt(cu) .. ':' .. fmt(cs - 1) .. ':' .. fmt(cf))
  end
  return {'ok', p}
end
local ra, base, maxcd = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[9])
if result == 'banned' then base = tonumber(ARGV[8]) end
local perProxy, total, perNS = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local ck = p .. '|' .. target
local ns = ns_of(p)
local nsk = P .. 'cns:' .. ns
local u, strikes, forget = cooldown(p, target)
local fresh = u == nil
if u == nil or now >= forget then
  u, strikes = 0, 0
end
if fresh then
  -- A new (proxy, target) pair: the bounds keep a flood of distinct targets from growing
  -- the table without end. Each namespace (tenant) has its share, so one at its share never
  -- refuses another's report. Forgotten pairs stop counting at once: before refusing, every
  -- one of them is swept, not only the batch each call sweeps.
  local function proxy_full()
    return perProxy > 0 and tonumber(redis.call('HGET', P .. 'coolp', p) or '0') >= perProxy
  end
  local function ns_full() return perNS > 0 and redis.call('ZCARD', nsk) >= perNS end
  local function total_full() return total > 0 and redis.call('HLEN', P .. 'cool') >= total end
  local function over()
    if proxy_full() then return 'proxy' end
    if total_full() then return 'total' end
    if ns_full() then return 'namespace' end
    return nil
  end
  local scope = over()
  if scope then
    while sweep() > 0 do end
    scope = over()
  end
  if scope and result == 'banned' then
    -- A ban is never lost to a flood (a crawler sent back to a banned proxy burns it again):
    -- it takes the place of the proxy's cooldown that ends first, then of its namespace's
    -- oldest (of the store's next to be forgotten when the namespace has none).
    if proxy_full() then
      local first = redis.call('ZRANGE', P .. 'cz:' .. p, 0, 0)
      if #first == 1 then drop_cool(p .. '|' .. first[1]) end
    end
    if ns_full() or total_full() then
      local oldest = redis.call('ZRANGE', nsk, 0, 0)
      if #oldest == 0 then oldest = redis.call('ZRANGE', P .. 'cexp', 0, 0) end
      if #oldest == 1 then drop_cool(oldest[1]) end
    end
    scope = nil
  end
  if scope then return {'toomany', p, scope} end
  redis.call('HINCRBY', P .. 'coolp', p, 1)
  -- Insertion order within the namespace: its oldest is the first a ban evicts.
  redis.call('ZADD', nsk, redis.call('INCR', P .. 'cseq'), ck)
end
local d
if result == 'rate_limited' then
  -- Slow down, not go away (decision 0261): the target's Retry-After, else the short
  -- default, never doubled and no strike.
  d = base
  if ra > 0 then d = ra end
  d = math.min(d, maxcd)
else
  strikes = strikes + 1
  d = base
  local i = 1
  while i < strikes and d < maxcd do
    d = d * 2
    i = i + 1
  end
  if ra > d then d = ra end
  if d > maxcd then d = maxcd end
end
-- A report during a cooldown never shortens it; the one that sets its end names its reason.
if now + d > u then
  u = now + d
  redis.call('HSET', P .. 'cwhy', ck, result)
end
-- Strikes are remembered for as long again as the cooldown.
forget = u + d
redis.call('HSET', P .. 'cool', ck, fmt(u) .. ':' .. fmt(strikes) .. ':' .. fmt(forget))
redis.call('ZADD', P .. 'cexp', fmt(forget), ck)
-- The proxy's live cooldowns by end, for the pools' view (ZCOUNT from now).
redis.call('ZADD', P .. 'cz:' .. p, fmt(u), target)
-- Every cooldown by end, and its namespace's, for the sites' view (cooling.lua).
redis.call('ZADD', P .. 'cu', fmt(u), ck)
redis.call('ZADD', P .. 'cun:' .. ns, fmt(u), ck)
return {'cooled', p, fmt(u), strikes}
