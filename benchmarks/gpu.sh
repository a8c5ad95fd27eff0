#!/usr/bin/env bash
# Every benchmark on a GPU, and the tests marked `cuda`; tables into benchmarks/gpu_results/.
#
#   bash benchmarks/gpu.sh            # the --quick variants where a script has one
#   FULL=1 bash benchmarks/gpu.sh     # the full runs (tens of minutes)
#
# Run from the repository root with the virtual environment active. Each
# script's table is written to benchmarks/gpu_results/<script>.md (stdout and
# stderr), with the device and torch version in the header; a failing script
# is reported and the others still run.
set -u
cd "$(dirname "$0")/.."
out=benchmarks/gpu_results
mkdir -p "$out"
python - <<'PY' > "$out/device.md"
import torch
assert torch.cuda.is_available(), "no CUDA device: this script is for a GPU machine"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
PY
cat "$out/device.md" || exit 1
quick="--quick"
if [ "${FULL:-0}" = "1" ]; then quick=""; fi
status=0
run() {
    name=$1; shift
    echo "== $name $*"
    if ! python "benchmarks/$name.py" "$@" --device cuda > "$out/$name.md" 2>&1; then
        echo "   FAILED (see $out/$name.md)"; status=1
    fi
    tail -n 25 "$out/$name.md"
}
run engine_overhead
run lc_speed $quick
run vision $quick
run shear_accuracy $quick
run uncertainty $quick
run bivariate $quick
run estimators
run method_study $quick
run large_plans
run ray_throughput $quick
echo "== tests marked cuda"
python -m pytest -m cuda -ra -q tests/test_cuda.py 2>&1 | tee "$out/test_cuda.md" || status=1
exit $status
