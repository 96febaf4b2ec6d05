-- Shared by every script (prepended by scripts.go). KEYS[1] is the key prefix, which carries a
-- hash tag so every key of one store lives in one slot. ARGV[1] is now in Unix ms ('' : the
-- Redis server's clock), ARGV[2] the session idle time in ms.
local P = KEYS[1]
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local idle = tonumber(ARGV[2])
local SWEEP = 256
local LAT_MAX = 4294967295

local function fmt(n) return string.format('%d', n) end

-- ns_of is a proxy key's namespace (keys are namespace/name): the tenant whose share it uses.
local function ns_of(key)
  return string.match(key, '^([^/]*)') or ''
end

-- count_down takes one from a counter in hash h, dropping the field at zero.
local function count_down(h, field)
  if redis.call('HINCRBY', h, field, -1) <= 0 then
    redis.call('HDEL', h, field)
  end
end

-- bytes_less is strcmp: Lua's < on strings follows the server's locale.
local function bytes_less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- score orders a bucket: best quality band (the band penalty bp the operator published, 0
-- best), then fewest leases, then lowest latency (ties: member order, the key). Every part
-- stays an exact integer in a double: bp < 4, load < 2^16, latency < 2^32.
local function score(bp, load, lat)
  if lat < 0 then lat = 0 end
  if lat > LAT_MAX then lat = LAT_MAX end
  if load > 65535 then load = 65535 end
  return bp * 281474976710656 + load * 4294967296 + lat
end

local function load_of(key)
  return tonumber(redis.call('HGET', P .. 'load', key) or '0')
end

-- place files a proxy in its bucket by what the operator published and its load: the
-- leasable ones with room in the sorted set, the others only in the counted sets.
local function place(key)
  local m = redis.call('HMGET', P .. 'm:' .. key, 'b', 'max', 'ok', 'lat', 'bp')
  local b = m[1]
  if not b then return end
  local bz, bu, bf = P .. 'bz:' .. b, P .. 'bu:' .. b, P .. 'bf:' .. b
  redis.call('SADD', P .. 'bm:' .. b, key)
  local load = load_of(key)
  if m[3] ~= '1' then
    redis.call('ZREM', bz, key)
    redis.call('SREM', bf, key)
    redis.call('SADD', bu, key)
  elseif load >= tonumber(m[2]) then
    redis.call('ZREM', bz, key)
    redis.call('SREM', bu, key)
    redis.call('SADD', bf, key)
  else
    redis.call('SREM', bu, key)
    redis.call('SREM', bf, key)
    redis.call('ZADD', bz, fmt(score(tonumber(m[5] or '0') or 0, load, tonumber(m[4]))), key)
  end
end

-- drop_from_bucket takes key out of bucket b's sets; the last member out deletes the bucket.
local function drop_from_bucket(key, b)
  redis.call('SREM', P .. 'bm:' .. b, key)
  redis.call('SREM', P .. 'bu:' .. b, key)
  redis.call('SREM', P .. 'bf:' .. b, key)
  redis.call('ZREM', P .. 'bz:' .. b, key)
  if redis.call('SCARD', P .. 'bm:' .. b) == 0 then
    redis.call('DEL', P .. 'bm:' .. b, P .. 'bu:' .. b, P .. 'bf:' .. b, P .. 'bz:' .. b)
    redis.call('HDEL', P .. 'bkt', b)
    redis.call('HDEL', P .. 'bns', b)
    redis.call('HDEL', P .. 'bpool', b)
    redis.call('INCR', P .. 'bver')
  end
end

-- end_lease removes a lease and frees its slot; the session goes idle with its last lease,
-- and only when it is still bound to the lease's proxy.
local function end_lease(id)
  redis.call('ZREM', P .. 'exp', id)
  local l = redis.call('HMGET', P .. 'l:' .. id, 'p', 's', 't', 'h')
  if not l[1] then return false end
  local p, s, t = l[1], l[2], l[3]
  if l[4] and l[4] ~= '' then redis.call('ZREM', P .. 'hl:' .. l[4], id) end
  redis.call('DEL', P .. 'l:' .. id)
  if t and t ~= '' then
    if redis.call('HINCRBY', P .. 'pt', p .. '|' .. t, -1) <= 0 then
      redis.call('HDEL', P .. 'pt', p .. '|' .. t)
    end
  end
  redis.call('SREM', P .. 'lp:' .. p, id)
  if redis.call('HINCRBY', P .. 'load', p, -1) <= 0 then
    redis.call('HDEL', P .. 'load', p)
  end
  place(p)
  if s and s ~= '' then
    local sk = P .. 's:' .. s
    if redis.call('HGET', sk, 'p') == p then
      if redis.call('HINCRBY', sk, 'live', -1) <= 0 then
        redis.call('HSET', sk, 'live', 0)
        redis.call('ZADD', P .. 'sess', fmt(now + idle), s)
      end
    end
  end
  return true
end

-- drop_cool forgets one (proxy, target) cooldown, swept or evicted, from every index.
local function drop_cool(ck)
  redis.call('HDEL', P .. 'cool', ck)
  redis.call('ZREM', P .. 'cexp', ck)
  local proxy, target = string.match(ck, '^(.-)|(.*)$')
  if proxy then
    redis.call('ZREM', P .. 'cz:' .. proxy, target)
    count_down(P .. 'coolp', proxy)
    redis.call('ZREM', P .. 'cns:' .. ns_of(proxy), ck)
    redis.call('ZREM', P .. 'cun:' .. ns_of(proxy), ck)
  end
  redis.call('ZREM', P .. 'cu', ck)
  redis.call('HDEL', P .. 'cwhy', ck)
end

-- unbind_session stops counting a session against its proxy's namespace (nsess).
local function unbind_session(proxy)
  if proxy then count_down(P .. 'nsess', ns_of(proxy)) end
end

-- sweep expires leases, idle sessions and forgotten cooldowns whose time has come, a bounded
-- batch per call: every script sweeps, so expiry needs no reaper in any one process.
local function sweep()
  local ids = redis.call('ZRANGEBYSCORE', P .. 'exp', '-inf', fmt(now), 'LIMIT', 0, SWEEP)
  for _, id in ipairs(ids) do end_lease(id) end
  local ss = redis.call('ZRANGEBYSCORE', P .. 'sess', '-inf', fmt(now), 'LIMIT', 0, SWEEP)
  for _, s in ipairs(ss) do
    unbind_session(redis.call('HGET', P .. 's:' .. s, 'p'))
    redis.call('DEL', P .. 's:' .. s)
    redis.call('ZREM', P .. 'sess', s)
  end
  local cs = redis.call('ZRANGEBYSCORE', P .. 'cexp', '-inf', fmt(now), 'LIMIT', 0, SWEEP)
  for _, c in ipairs(cs) do drop_cool(c) end
  return #ids + #ss + #cs
end

-- cooldown parses a (proxy, target) cooldown: until, strikes, forget (nil when none).
local function cooldown(p, target)
  local v = redis.call('HGET', P .. 'cool', p .. '|' .. target)
  if not v then return nil end
  local u, s, f = string.match(v, '^(%d+):(%d+):(%d+)$')
  return tonumber(u), tonumber(s), tonumber(f)
end

-- taken reports whether a live lease holds p for target: one holder per (proxy, target), since
-- two crawlers on one site through one address double that address's rate there.
local function taken(p, target)
  return tonumber(redis.call('HGET', P .. 'pt', p .. '|' .. target) or '0') > 0
end

-- live returns a lease's proxy when the lease is live and its proxy still in the fleet,
-- ending it when the proxy has left.
local function live(id)
  local p = redis.call('HGET', P .. 'l:' .. id, 'p')
  if not p then return nil end
  if redis.call('HEXISTS', P .. 'fleet', p) == 0 then
    end_lease(id)
    return nil
  end
  return p
end

