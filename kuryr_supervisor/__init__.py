"""kuryr-supervisor: a CNI node daemon run by a supervisor with health governance."""
