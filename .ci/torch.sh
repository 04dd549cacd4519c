# install_torch PYTHON: a CPU build of torch unless the machine has an NVIDIA GPU, never a
# multi-GB CUDA download on a machine that cannot use it. A CPU wheel already on disk (pip's
# find-links) is taken first, without touching the network. Sourced by ./dev and .ci/wheel-check.
install_torch() {
  local py=$1
  if command -v nvidia-smi >/dev/null 2>&1; then
    "$py" -m pip install -q "torch>=2.2"
  else
    { "$py" -m pip install -q --no-index --no-deps "torch==2.13.0" 2>/dev/null \
        && "$py" -m pip install -q "torch==2.13.0"; } \
      || "$py" -m pip install -q --extra-index-url https://download.pytorch.org/whl/cpu "torch==2.13.0+cpu" \
      || "$py" -m pip install -q --extra-index-url https://download.pytorch.org/whl/cpu "torch>=2.2,<3"
  fi
}
