"""llama.cpp-family engines: build with the top-k tool, score through it (stdlib only)."""
