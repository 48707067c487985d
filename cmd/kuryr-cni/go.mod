module kuryr-supervisor/cmd/kuryr-cni

go 1.19
