-- ARGV: 3 bucket-set version the caller matched against, 4 lease id, 5 ttl ms, 6 target,
-- 7 session key, 8 most sessions, 9 proxies to avoid (newline-separated), 10 most sessions
-- per namespace, 11 proxies never to lease (newline-separated: the caller's egress policy
-- denied their records), 12 holder (the caller's token name, '' : none), 13 most live leases
-- per holder and namespace (0: no bound), 14 the holder's lower shares ("ns=n" lines), 15.. the
-- ids of the buckets the selector matches.
local FIRST = 15
if (redis.call('GET', P .. 'bver') or '0') ~= ARGV[3] then return {'stale'} end
sweep()
local id, ttl, target, session, maxs = ARGV[4], tonumber(ARGV[5]), ARGV[6], ARGV[7], tonumber(ARGV[8])
local maxns, holder, maxheld = tonumber(ARGV[10]), ARGV[12], tonumber(ARGV[13])
local inb = {}
for i = FIRST, #ARGV do inb[ARGV[i]] = true end
local avoid = {}
for k in string.gmatch(ARGV[9], '[^\n]+') do avoid[k] = true end
local denied = {}
for k in string.gmatch(ARGV[11], '[^\n]+') do denied[k] = true end
if holder == '' then maxheld = 0 end
local shares = {}
for ns, n in string.gmatch(ARGV[14], '([^\n=]*)=(%d+)') do
  n = tonumber(n)
  if n > 0 and n < maxheld then shares[ns] = n end
end

-- capped reports whether the holder already holds its most leases in namespace ns, noting
-- when its first one there ends.
local capped_at
local function capped(ns)
  if maxheld <= 0 then return false end
  local hk = P .. 'hl:' .. holder .. '|' .. ns
  if redis.call('ZCARD', hk) < (shares[ns] or maxheld) then return false end
  local first = redis.call('ZRANGE', hk, 0, 0, 'WITHSCORES')
  if #first == 2 and (capped_at == nil or tonumber(first[2]) < capped_at) then capped_at = tonumber(first[2]) end
  return true
end

local function cooling(p)
  if target == '' then return false end
  local u = cooldown(p, target)
  return u ~= nil and now < u
end

local function held(p)
  return target ~= '' and taken(p, target)
end

-- free_at is the earliest time a refused proxy frees up without anyone acting (the 409's
-- availableAt): its cooldown for the target ends, or its lease for the target expires.
local free
local function note_free(t)
  if t and (free == nil or t < free) then free = t end
end

local function held_until(p)
  for _, l in ipairs(redis.call('SMEMBERS', P .. 'lp:' .. p)) do
    local v = redis.call('HMGET', P .. 'l:' .. l, 't', 'exp')
    if v[1] == target then note_free(tonumber(v[2])) end
  end
end

local function grant(p)
  local load = redis.call('HINCRBY', P .. 'load', p, 1)
  place(p)
  local exp = now + ttl
  redis.call('HSET', P .. 'l:' .. id, 'p', p, 't', target, 's', session, 'ttl', fmt(ttl), 'exp', fmt(exp), 'by', holder)
  redis.call('ZADD', P .. 'exp', fmt(exp), id)
  local ns = ns_of(p)
  if maxheld > 0 then
    local hk = holder .. '|' .. ns
    redis.call('HSET', P .. 'l:' .. id, 'h', hk)
    redis.call('ZADD', P .. 'hl:' .. hk, fmt(exp), id)
  end
  redis.call('SADD', P .. 'lp:' .. p, id)
  if target ~= '' then redis.call('HINCRBY', P .. 'pt', p .. '|' .. target, 1) end
  if session ~= '' then
    local sk = P .. 's:' .. session
    local bound = redis.call('HGET', sk, 'p')
    -- Each namespace (tenant) has its share of the bound keys: a key already bound moves
    -- freely within its namespace; a new one needs room in the store and in the namespace.
    local room = tonumber(redis.call('HGET', P .. 'nsess', ns) or '0') < maxns
    local can
    if bound then
      can = ns_of(bound) == ns or room
    else
      can = room and redis.call('ZCARD', P .. 'sess') < maxs
    end
    if can then
      if bound ~= p then
        -- Leases of the old binding still count down on their own proxy: end_lease only
        -- touches the session when the proxies agree.
        unbind_session(bound or nil)
        redis.call('HINCRBY', P .. 'nsess', ns, 1)
        redis.call('HSET', sk, 'p', p, 'live', 0)
      end
      redis.call('HINCRBY', sk, 'live', 1)
      redis.call('ZADD', P .. 'sess', '+inf', session)
    end
  end
  return {'ok', p, load, fmt(exp), redis.call('HGET', P .. 'fleet', p) or '', redis.call('HGET', P .. 'health', p) or ''}
end

if session ~= '' then
  local bp = redis.call('HGET', P .. 's:' .. session, 'p')
  if bp then
    local m = redis.call('HMGET', P .. 'm:' .. bp, 'b', 'max', 'ok')
    if m[1] and inb[m[1]] and m[3] == '1' and not denied[bp] and load_of(bp) < tonumber(m[2])
      and not cooling(bp) and not held(bp) and not capped(ns_of(bp)) then
      return grant(bp)
    end
  end
end

local matching, unhealthy, full, cool, leased, held_out = 0, 0, 0, 0, 0, 0
local best, best_score, fallback
-- scan reads one bucket's head: the head usually wins, so a small page first, larger ones
-- past cooling proxies.
local function scan(b)
  unhealthy = unhealthy + redis.call('SCARD', P .. 'bu:' .. b)
  full = full + redis.call('SCARD', P .. 'bf:' .. b)
  local start, size = 0, 4
  while true do
    local page = redis.call('ZRANGE', P .. 'bz:' .. b, start, start + size - 1, 'WITHSCORES')
    if #page == 0 then return end
    for j = 1, #page, 2 do
      local p, sc = page[j], tonumber(page[j + 1])
      if best and (sc > best_score or (sc == best_score and not bytes_less(p, best))) then
        return -- nothing further in this bucket beats the best so far
      end
      if denied[p] then
        unhealthy = unhealthy + 1 -- never leased: counted as a proxy that cannot be
      elseif cooling(p) then
        cool = cool + 1
        note_free((cooldown(p, target)))
      elseif held(p) then
        leased = leased + 1
        held_until(p)
      elseif avoid[p] then
        fallback = fallback or p -- passed over while another fits
      else
        best, best_score = p, sc
        return
      end
    end
    start = start + size
    size = 64
  end
end
for i = FIRST, #ARGV do
  local b = ARGV[i]
  local members = redis.call('SCARD', P .. 'bm:' .. b)
  matching = matching + members
  if maxheld > 0 and capped(redis.call('HGET', P .. 'bns', b) or '') then
    -- The holder's share of this namespace is taken: its proxies are others' to lease.
    held_out = held_out + members
  else
    scan(b)
  end
end
if not best then best = fallback end
if not best then
  if held_out > 0 then
    -- The holder's own share kept it from proxies it could otherwise have had: that is
    -- the answer (429), with when its first lease there ends.
    return {'holdercap', fmt(capped_at or now), matching, held_out}
  end
  -- Demand for the pools whose members were at capacity, once per pool (namespace/pool).
  local seen = {}
  for i = FIRST, #ARGV do
    local b = ARGV[i]
    if redis.call('SCARD', P .. 'bf:' .. b) > 0 then
      local pk = redis.call('HGET', P .. 'bpool', b)
      if pk and not seen[pk] then
        seen[pk] = true
        redis.call('HINCRBY', P .. 'denied', pk, 1)
      end
    end
  end
  if full > 0 then
    -- No lease on a full proxy ends before the first lease of the store does.
    local first = redis.call('ZRANGE', P .. 'exp', 0, 0, 'WITHSCORES')
    if #first == 2 then note_free(tonumber(first[2])) end
  end
  return {'nomatch', matching, unhealthy, full, cool, leased, free and fmt(free) or ''}
end
return grant(best)
