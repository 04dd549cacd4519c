#!/bin/sh
# The stub's engine build: what sparkinfer's `cmake --build` leaves for the witness's build step
# (build/runtime/libsparkinfer_runtime.so, build/moe/libsparkinfer_moe.so, build/CMakeCache.txt
# naming the compiler and CUDA's runtime), and the stub's qwen3_gguf_score. STUB_CUDA: the stand-in toolkit (include/, lib64/).
set -eu
CXX=${CXX:-g++}
PREFILL_US=0
STEP_US=0
[ -f stub_speed.env ] && . ./stub_speed.env
mkdir -p build/runtime build/moe
$CXX -std=c++17 -O1 -shared -fPIC -Imoe/include -o build/moe/libsparkinfer_moe.so \
    -I"$STUB_CUDA/include" src/stub_moe.cpp
$CXX -std=c++17 -O1 -shared -fPIC -Iruntime/include -Imoe/include -I"$STUB_CUDA/include" \
    -DSTUB_PREFILL_US="$PREFILL_US" -DSTUB_STEP_US="$STEP_US" \
    -o build/runtime/libsparkinfer_runtime.so src/stub_runtime.cpp
$CXX -std=c++17 -O1 -Iruntime/include -Imoe/include -Iruntime/examples -I"$STUB_CUDA/include" \
    -o build/runtime/qwen3_gguf_score src/stub_score.cpp -Lbuild/runtime -lsparkinfer_runtime \
    -Lbuild/moe -lsparkinfer_moe -L"$STUB_CUDA/lib64" -lcudart \
    -Wl,-rpath,'$ORIGIN':'$ORIGIN/../moe':"$STUB_CUDA/lib64"
cat > build/CMakeCache.txt <<CACHE
# This is the CMakeCache file.
CMAKE_CXX_COMPILER:FILEPATH=$(command -v "$CXX")
CUDA_CUDART:FILEPATH=$STUB_CUDA/lib64/libcudart.so
CUDAToolkit_BIN_DIR:PATH=$STUB_CUDA/bin
CACHE
echo "stub engine built"
