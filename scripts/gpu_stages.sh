# The set-up stages of the one GPU runner (scripts/gpu_run.sh; scripts/gpu_runner/chain.py runs
# each as `bash -c '. scripts/gpu_stages.sh && stage_NAME'` in a fresh bash). A stage reads only
# the settings the chain passes (gpu_runner.chain.stage_env: ROOT W SHARED PY ENGINE SYNTH
# QWEN36 QWEN36_FULL SANDBOX REF_SHA REF_KEY JOBS, with PATH and PYTHONPATH;
# tests/test_gpu_scripts.py holds it to that) and writes its logs under $W/log. Sourced, not
# run: it sets nothing at the top.

fail() { echo "FAIL: $*" >&2; return 1; }
need() { local f; for f in "$@"; do [ -e "$SHARED/$f" ] || { fail "shared/$f is missing"; return 1; }; done; }

stage_setup() {  # the wheels, and the engine's repository with every head as a real commit
  need wheels || return 1
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$SHARED"/wheels/*.whl ||
    fail "pip install of shared/wheels" || return 1
  (cd "$ROOT" && "$PY" -c "import github, paramiko, waitress, gguf, scipy, rich, evalbot") ||
    fail "evalbot's dependencies do not import" || return 1
  engine_repository
}

engine_repository() {  # $W/repo: the engine's tarball as `main`, each head a branch; $W/heads.env
  local tarball
  if [ "$ENGINE" = sparkinfer ]; then tarball=sparkinfer-ba8add3.tar.gz; else tarball=llama.cpp-pruned.tar.gz; fi
  need "$tarball" || return 1
  rm -rf "$W/repo" && mkdir -p "$W/repo" && tar xzf "$SHARED/$tarball" -C "$W/repo" || return 1
  rm -f "$W/repo/.git"  # the llama.cpp vendor tree's submodule pointer: not a repository here
  git -C "$W/repo" init -q -b main && git -C "$W/repo" add -Af &&
    git -C "$W/repo" -c user.name=evalbot-e2e -c user.email=e2e@localhost commit -qm "$ENGINE ($tarball)" ||
    fail "the engine repository" || return 1
  (cd "$ROOT/scripts" && "$PY" -m gpu_runner.heads "$ENGINE" "$W/repo") > "$W/heads.env" ||
    fail "the heads (a head's old text is not in this tree once)" || return 1
  chmod -R a+rX "$W/repo"
  cp "$W/heads.env" "$W/log/"
}

stage_box() {  # the users of `evalbot box init`, and proof that the sandbox user sees the GPU
  # The device image lacks bubblewrap and sudo, which `box init` installs from the network on a
  # real box: the Debian packages carried in shared/debs/ (`apt-get download bubblewrap sudo`).
  command -v bwrap >/dev/null && command -v sudo >/dev/null ||
    dpkg -i "$SHARED"/debs/*.deb > "$W/log/debs.txt" 2>&1 ||
    fail "bubblewrap/sudo missing and shared/debs/ does not install them (debs.txt)" || return 1
  (cd "$ROOT" && "$PY" -m evalbot box init --no-install --workdir "$W/box" --python "$PY" 2>&1 | tail -5)
  id "$SANDBOX" >/dev/null 2>&1 || fail "box init did not create $SANDBOX" || return 1
  ls -l /dev/nvidia* > "$W/log/dev-nvidia.txt" 2>&1
  # through the real launcher (new net/UTS/IPC namespaces, no groups, exactly the given
  # environment) with the run stage's limits; no address-space cap (CUDA reserves far more)
  local probe="import ctypes; c=ctypes.CDLL('libcuda.so.1'); n=ctypes.c_int(); assert c.cuInit(0)==0 and c.cuDeviceGetCount(ctypes.byref(n))==0 and n.value>0; print('cuInit ok, devices', n.value)"
  sandboxed() {  # extra env JSON, argv...
    local extra=$1; shift
    (cd "$ROOT" && "$PY" -I engine/sandbox/sandbox_exec.py run "{\"user\":\"$SANDBOX\",\"cwd\":\"/tmp\",\"limits\":{\"nproc\":1024,\"nofile\":4096,\"fsize_mb\":1024},\"env\":{\"PATH\":\"$PATH\",\"LC_ALL\":\"C\",\"HOME\":\"/tmp\"$extra}}" -- "$@")
  }
  : > "$W/sandbox-env.txt"
  if ! sandboxed "" "$PY" -c "$probe" 2>&1 | tee "$W/log/sandbox-gpu.txt" | grep -q "cuInit ok"; then
    [ -n "${LD_LIBRARY_PATH:-}" ] && sandboxed ",\"LD_LIBRARY_PATH\":\"$LD_LIBRARY_PATH\"" "$PY" -c "$probe" 2>&1 |
      tee -a "$W/log/sandbox-gpu.txt" | grep -q "cuInit ok" &&
      echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" > "$W/sandbox-env.txt" &&
      echo "the sandbox needs LD_LIBRARY_PATH for libcuda: the e2e profiles' env carries it"
    [ -s "$W/sandbox-env.txt" ] ||
      fail "CUDA cannot initialise as $SANDBOX in the sandbox (dev-nvidia.txt, sandbox-gpu.txt)" || return 1
  fi
  sandboxed "" nvidia-smi -L >> "$W/log/sandbox-gpu.txt" 2>&1
  [ "$(id -u)" = 0 ] && echo "harness as root: it enters the sandbox directly (docs/box.md)"
  return 0
}

stage_model() {  # the synthetic models (written in parallel) and their digests
  local m=$W/models pids=() p
  mkdir -p "$m"
  if [ "$ENGINE" = llamacpp ]; then
    need synth_gguf.py ggml-vocab-qwen2.gguf || return 1
    "$PY" "$SHARED/synth_gguf.py" "$SHARED/ggml-vocab-qwen2.gguf" "$m/qwen3-0p6b-synth-f16.gguf" \
      --layers 28 --embd 1024 --ff 3072 --heads 16 --kv 8 --hd 128 > "$W/log/synth.txt" 2>&1 ||
      fail "synth_gguf.py (synth.txt)" || return 1
  else
    need ggml-vocab-qwen35.gguf || return 1
    if [ "$SYNTH" = stable ]; then  # a file the engine and the reference agree on (synth_stability.sh)
      "$PY" "$ROOT/scripts/gpu_synth_qwen35.py" "$SHARED/ggml-vocab-qwen35.gguf" "$m/qwythos-synth.gguf" \
        --outtype q4_k_m --embd-scale 1 --branch-scale 0.001 --output-norm 3 > "$W/log/synth-qwythos.txt" 2>&1 &
    else
      need synth_qwen35.py || return 1
      "$PY" "$SHARED/synth_qwen35.py" "$SHARED/ggml-vocab-qwen35.gguf" "$m/qwythos-synth.gguf" \
        --outtype q4_k_m > "$W/log/synth-qwythos.txt" 2>&1 &
    fi
    pids+=($!)
    if [ "$QWEN36" = 1 ]; then
      "$PY" "$ROOT/scripts/gpu_synth_qwen35.py" "$SHARED/ggml-vocab-qwen35.gguf" "$m/qwen36-synth-4l.gguf" \
        --outtype q4_k_m --qwen36 --layers 4 > "$W/log/synth-qwen36.txt" 2>&1 &
      pids+=($!)
    fi
    if [ "$QWEN36_FULL" = 1 ]; then  # the real shape, 40 layers (~21 GB): written once, here only
      "$PY" "$ROOT/scripts/gpu_synth_qwen35.py" "$SHARED/ggml-vocab-qwen35.gguf" "$m/qwen36-synth.gguf" \
        --outtype q4_k_m --qwen36 > "$W/log/synth-qwen36-full.txt" 2>&1 &
      pids+=($!)
    fi
    for p in "${pids[@]}"; do wait "$p" || fail "a synthetic model (synth-*.txt)" || return 1; done
  fi
  chmod -R a+rX "$m"
  (cd "$m" && sha256sum ./*.gguf | sed 's| \./| |') | tee "$W/log/models.sha256"
}

stage_reference() {  # the pinned llama.cpp: the carried CUDA build if it runs here, else built
  local ref=$W/models/llamacpp-reference/$REF_KEY carried
  carried=$(ls "$SHARED"/llamacpp-reference.tar.xz "$SHARED"/llamacpp-reference.tgz 2>/dev/null | head -1)
  if [ ! -e "$ref/manifest.json" ] && [ -n "$carried" ]; then
    if "$PY" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" \
         "$carried" "$W/models" && carried_reference_runs "$ref"; then
      echo "reference: the carried build ${carried##*/} runs here ($(grep -m1 CUDA0 "$W/log/reference-carried.txt"))"
    else
      rm -rf "$ref"
      echo "reference: the carried build does not run here (reference-carried.txt): building it"
    fi
  fi
  if [ ! -e "$ref/manifest.json" ]; then
    need llama.cpp-pruned.tar.gz || return 1
    (cd "$ROOT" && "$PY" -m engine.llamacpp.reference_build --models-dir "$W/models" --key "$REF_KEY" \
      --tarball "$SHARED/llama.cpp-pruned.tar.gz" --sha256 "$REF_SHA" --backend cuda --cuda-arch 90 \
      --jobs "$JOBS" --cmake-flag=-DGGML_CUDA_FA=OFF) > "$W/log/reference-build.txt" 2>&1 ||
      fail "llama.cpp reference build (reference-build.txt)" || return 1
  fi
  chmod -R a+rX "$W/models"
  # can the reference score the primary model? (else no evaluation with correctness can run)
  local model=qwythos-synth.gguf
  [ "$ENGINE" = llamacpp ] && model=qwen3-0p6b-synth-f16.gguf
  "$PY" -c "import random; r=random.Random(20); print([[r.randrange(1000, 150000) for _ in range(64)]])" > "$W/probe.json"
  (cd "$ROOT" && "$PY" engine/llamacpp/score.py --reference "$REF_KEY" --model "$W/models/$model" \
    --tokens "$W/probe.json" --topk 8 --out "$W/probe.out.json") > "$W/log/probe.txt" 2>&1 ||
    fail "the reference cannot score $model (probe.txt)" || return 1
  echo "reference scores $model"
}

carried_reference_runs() {  # DIR: its artifacts match the manifest, load every library, see the GPU
  local dir=$1 bin
  {
    "$PY" -c "import sys; from engine.llamacpp.manifest import verified_tool; verified_tool(__import__('pathlib').Path(sys.argv[1]))" "$dir" ||
      return 1
    for bin in llama-bench evalbot-topk; do
      echo "== ldd $bin" && ldd "$dir/$bin" || return 1
      ! ldd "$dir/$bin" | grep -q "not found" || return 1
    done
    # usage and exit 64 without arguments; LD_BIND_NOW resolves every symbol the binaries use now,
    # so a library with a missing symbol fails here rather than in the middle of a scoring
    LD_BIND_NOW=1 "$dir/evalbot-topk"; [ $? = 64 ] || return 1
    local devices; devices=$(LD_BIND_NOW=1 "$dir/llama-bench" --list-devices 2>&1)
    echo "$devices" && grep -q "CUDA0" <<< "$devices"
  } > "$W/log/reference-carried.txt" 2>&1
}

stage_sandbox_ab() {  # PAIRS: main's sweep through the old launcher and the bubblewrap one (issue 31)
  need old_sandbox_exec.py sparkinfer-ba8add3.tar.gz || return 1
  local b=$W/ab-build extra spec
  if [ ! -x "$b/build/runtime/qwen3_gguf_bench" ]; then
    rm -rf "$b" && mkdir -p "$b" && tar xzf "$SHARED/sparkinfer-ba8add3.tar.gz" -C "$b" || return 1
    (cd "$b" && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
       -DBUILD_TESTS=OFF -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON &&
     cmake --build build -j "$JOBS" --target qwen3_gguf_bench) > "$W/log/ab-build.txt" 2>&1 ||
      fail "the bench's build (ab-build.txt)" || return 1
  fi
  chmod -R a+rX "$b" "$W/models"
  cp "$SHARED/old_sandbox_exec.py" "$W/old_sandbox_exec.py"
  extra=$(sed -n 's/^\([A-Z_]*\)=\(.*\)$/,"\1":"\2"/p' "$W/sandbox-env.txt" 2>/dev/null | tr -d '\n')
  spec="{\"user\":\"$SANDBOX\",\"cwd\":\"$b\",\"ro\":[\"$b\",\"$W/models\"],
\"limits\":{\"nproc\":1024,\"nofile\":4096,\"fsize_mb\":1024},
\"env\":{\"PATH\":\"$PATH\",\"LC_ALL\":\"C\",\"HOME\":\"/tmp\",\"CUDA_VISIBLE_DEVICES\":\"0\",
\"SPARKINFER_KV_INT8\":\"1\"$extra}}"
  mkdir -p "$W/eval"
  (cd "$ROOT" && "$PY" scripts/sandbox_ab.py --old "$W/old_sandbox_exec.py" --new engine/sandbox/sandbox_exec.py \
    --spec "$spec" --pairs "${1:-6}" --out "$W/eval/sandbox-ab.json" -- /usr/bin/env \
    SPARKINFER_BENCH_SWEEP_CTXS=128,4096,32768,65536 "$b/build/runtime/qwen3_gguf_bench" \
    "$W/models/qwythos-synth.gguf" 128 sweep) | tee "$W/eval/sandbox-ab.txt"
  return "${PIPESTATUS[0]}"
}
