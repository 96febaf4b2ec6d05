-- ARGV: 3 most leases to list, 4.. namespaces (none: every namespace). Answers how many live
-- leases there are on proxies of those namespaces still in the fleet, then, for at most the
-- limit of them (the first to expire first), id, proxy, holder, target, session and expiry.
-- Walks every live lease (bounded by the fleet's capacity); changes nothing but the sweep.
sweep()
local limit = tonumber(ARGV[3])
local nss = nil
if #ARGV >= 4 then
  nss = {}
  for i = 4, #ARGV do nss[ARGV[i]] = true end
end
local out = {0}
local total = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'exp', '(' .. fmt(now), '+inf')) do
  local v = redis.call('HMGET', P .. 'l:' .. id, 'p', 'by', 't', 's', 'exp')
  local p = v[1]
  if p and (nss == nil or nss[ns_of(p)]) and redis.call('HEXISTS', P .. 'fleet', p) == 1 then
    total = total + 1
    if total <= limit then
      out[#out + 1] = id
      out[#out + 1] = p
      out[#out + 1] = v[2] or ''
      out[#out + 1] = v[3] or ''
      out[#out + 1] = v[4] or ''
      out[#out + 1] = v[5] or '0'
    end
  end
end
out[1] = total
return out
