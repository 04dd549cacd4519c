"""sparkinfer: evalbot's own witness tool for it (witness.cpp) and the build step that compiles it
against each side's tree (build_witness.py; standard library only)."""
