"""Running the PR's code on the box: the sandbox, its root launcher, safe file I/O, one engine process."""
