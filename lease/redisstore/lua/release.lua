-- ARGV[3]: lease id.
sweep()
end_lease(ARGV[3])
return 1
