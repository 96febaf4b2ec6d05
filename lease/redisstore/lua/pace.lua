-- The gateway's pace shared between replicas (pace.go). ARGV[3] site,
-- ARGV[4] upstream key, ARGV[5] interval ms (the caller's pace for the site), ARGV[6] hold ms
-- (0: book a send; above 0: a 429's Retry-After, the upstream sends nothing to the site for that
-- long), ARGV[7] floor ms (with a hold: the least interval any replica may use for the site
-- from now, for ARGV[8] ms).
-- Booking returns {ms until the send may go, the interval used}: the later of now and the
-- upstream's next free slot, which then moves one interval on. Keys live only as long as they
-- matter: a slot until it passes, a floor for ARGV[8] ms (its end kept in the value too, on the
-- same clock as now).
local site, up = ARGV[3], ARGV[4]
local interval, hold, floor, keep = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local k = P .. 'pace:' .. site .. '|' .. up
local fk = P .. 'pacefloor:' .. site
local nxt = tonumber(redis.call('GET', k) or '0')
-- floor_now is the site's floor while it lasts (kept as "floor:until", on the store's clock).
local function floor_now()
  local v = redis.call('GET', fk)
  if not v then return 0 end
  local f, untl = string.match(v, '^(%d+):(%d+)$')
  if not f or tonumber(untl) <= now then return 0 end
  return tonumber(f)
end
if hold > 0 then
  if now + hold > nxt then
    redis.call('SET', k, fmt(now + hold), 'PX', fmt(hold))
  end
  if floor > floor_now() then
    redis.call('SET', fk, fmt(floor) .. ':' .. fmt(now + keep), 'PX', fmt(keep))
  end
  return {0, interval}
end
local f = floor_now()
if f > interval then interval = f end
local at = math.max(now, nxt)
redis.call('SET', k, fmt(at + interval), 'PX', fmt(at + interval - now + 1))
return {at - now, interval}
