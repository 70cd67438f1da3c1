module github.com/lanpo-rl/lanpo

go 1.22

require github.com/sugarme/gotch v0.9.1
