module github.com/batonlock/baton

go 1.26
