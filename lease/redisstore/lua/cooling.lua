-- ARGV: 3 most cooldowns to list, 4.. namespaces (none: every namespace). Answers how many
-- cooldowns are in force in those namespaces, then, for at most that many of each index read
-- (the latest ends first), key, until, strikes and reason. Changes nothing. A key a replica
-- of an older version dropped without its indexes here is skipped (its pair is gone).
local limit = tonumber(ARGV[3])
local idx = {}
if #ARGV < 4 then
  idx[1] = P .. 'cu'
else
  for i = 4, #ARGV do idx[#idx + 1] = P .. 'cun:' .. ARGV[i] end
end
local from = '(' .. fmt(now)
local total = 0
local out = {0}
for _, k in ipairs(idx) do
  total = total + redis.call('ZCOUNT', k, from, '+inf')
  for _, ck in ipairs(redis.call('ZREVRANGEBYSCORE', k, '+inf', from, 'LIMIT', 0, limit)) do
    local proxy, target = string.match(ck, '^(.-)|(.*)$')
    if proxy then
      local u, s = cooldown(proxy, target)
      if u ~= nil and u > now then
        out[#out + 1] = ck
        out[#out + 1] = fmt(u)
        out[#out + 1] = fmt(s)
        out[#out + 1] = redis.call('HGET', P .. 'cwhy', ck) or ''
      end
    end
  end
end
out[1] = total
return out
