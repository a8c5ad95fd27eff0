#!/usr/bin/env bash
# One GPU, one markdown table: the CUDA tests, every class's default on resnet18 and
# LLMShapley on a 1B Llama decoder, against the bare model and Captum.
#
#   bash benchmarks/gpu.sh --quick [TABLE.md]        # under 8 minutes on one H100/H200
#   GPU_TABLE=$OUT/gpu.md bash benchmarks/gpu.sh --quick
#   bash benchmarks/gpu.sh                           # Captum's LLM run at every ordering
#   bash benchmarks/gpu.sh --no-llm [TABLE.md]       # tests, defaults, amortized: ~5 minutes
#   bash benchmarks/gpu.sh --quick --no-amortized    # tests, defaults, LLM: ~6 minutes
#
# The table goes to the argument, else $GPU_TABLE, else benchmarks/gpu_results/gpu.md;
# each step's full output goes next to it (gpu_tests.log, gpu_defaults.log,
# gpu_amortized.log, gpu_llm.log). It is headed by the device, torch and CUDA versions and the date, then:
# method, examples, rows, s, rows/s, share of bare forward, Captum at the same
# evaluations, peak GiB; the tests' summary and the LLM script's ratios follow it.
#
# Runs from any directory; this checkout's captum_graphshap is used (PYTHONPATH), not an
# installed one. Python packages the image lacks (captum, transformers, torchvision,
# pytest, ...) are installed from wheels in .whl/ at the repository root
# (pip --no-index --find-links .whl); without them it stops, naming what is missing.
# Every step has a time limit (tests 100 s, resnet18 150 s, the default's estimator
# 60 s, amortized 200 s, LLM 240 s); a step that fails or times out is reported in the
# table and the others still run. The resnet18 step profiles each default below 0.9 of
# the bare forward (torch.profiler, in gpu_defaults.log); fit_profile.py times the
# default's own estimator by phase and chunk size (gpu_fit_profile.log); the amortized
# step fits the image explainer on 20,000 images at 64 evaluations each and explains
# 200,000 images for throughput.
set -u
cd "$(dirname "$0")/.."
root=$PWD
quick=""
llm=1
amortized=1
out="${GPU_TABLE:-}"
for arg in "$@"; do
    case "$arg" in
        --quick) quick="--quick" ;;
        --no-llm) llm=0 ;;
        --no-amortized) amortized=0 ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) out="$arg" ;;
    esac
done
out="${out:-benchmarks/gpu_results/gpu.md}"
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
logs=$(dirname "$out")
PY=${PYTHON:-python}
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"

# ------------------------------------------------------------------ packages
# module -> pip name; scikit-learn is optional (only Captum's KernelShap column needs it)
missing=$($PY - <<'PY'
import importlib.util
need = {"captum": "captum", "numpy": "numpy", "networkx": "networkx", "tqdm": "tqdm",
        "matplotlib": "matplotlib", "torchvision": "torchvision",
        "transformers": "transformers", "pytest": "pytest"}
print(" ".join(pip for module, pip in need.items() if importlib.util.find_spec(module) is None))
PY
) || { echo "gpu.sh: '$PY' does not run (set PYTHON=...)" >&2; exit 2; }
if [ -n "$missing" ]; then
    if [ -d "$root/.whl" ]; then
        echo "== installing from .whl/: $missing"
        # shellcheck disable=SC2086
        if ! $PY -m pip install -q --no-index --find-links "$root/.whl" $missing; then
            echo "gpu.sh: could not install $missing from .whl/ (no wheel there, or a" \
                 "dependency's wheel missing); add them and rerun" >&2
            exit 2
        fi
    else
        echo "gpu.sh: python lacks $missing and there is no .whl/ folder of wheels at" \
             "$root; put the wheels there (pip download ... -d .whl) and rerun" >&2
        exit 2
    fi
fi
if ! $PY -c "import sklearn" 2>/dev/null && [ -d "$root/.whl" ]; then
    $PY -m pip install -q --no-index --find-links "$root/.whl" scikit-learn 2>/dev/null \
        || echo "== no scikit-learn: the table's Captum KernelShap column stays empty"
fi
$PY - > "$out" <<'PY' || { echo "gpu.sh: no CUDA device visible to torch" >&2; exit 2; }
import datetime, torch
assert torch.cuda.is_available(), "no CUDA device: this script is for a GPU machine"
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
print(f"# GPU table ({torch.cuda.get_device_name()})\n")
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"{now}.\n")
PY
cat "$out"
status=0

step() {  # step NAME SECONDS COMMAND...: run with a limit, log to $logs/gpu_NAME.log
    name=$1; limit=$2; shift 2
    echo "== $name (at most $limit s): $*"
    start=$(date +%s)
    timeout "$limit" "$@" > "$logs/gpu_$name.log" 2>&1
    rc=$?
    echo "   exit $rc after $(( $(date +%s) - start )) s"
    tail -n 15 "$logs/gpu_$name.log"
    if [ $rc -ne 0 ]; then
        status=1
        failures="${failures:-}\n- $name: exit $rc$([ $rc -eq 124 ] && echo ' (time limit)'), see gpu_$name.log"
    fi
}

# -o addopts="": the image may lack pytest-xdist, and these few tests run in one process
step tests 100 $PY -m pytest -o addopts="" -m cuda -ra -q -p no:cacheprovider tests/test_cuda.py
step defaults 150 $PY benchmarks/gpu_defaults.py --device cuda --profile 0.9 --table "$out"
step fit_profile 60 $PY benchmarks/fit_profile.py --device cuda --chunks 32,256,1024
[ "$amortized" = 1 ] && step amortized 200 $PY benchmarks/amortized.py --only images --device cuda --images 20000 \
    --test-images 100 --throughput 200000
[ "$llm" = 1 ] && step llm 240 $PY benchmarks/llm_scale.py --device cuda $quick --table "$out"

{
    echo
    echo "CUDA tests (tests/test_cuda.py): $(tail -n 1 "$logs/gpu_tests.log")"
    echo
    grep -E "bare forward|token-by-token|Captum LLMAttribution|faster at equal|-token prompt:|Captum (sampling|kernel)|cross_contributions|device busy|PairedKernelShap \(default\)|chunks of" \
        "$logs/gpu_defaults.log" "$logs/gpu_fit_profile.log" "$logs/gpu_llm.log" 2>/dev/null | sed 's/^[^:]*gpu_/- gpu_/'
    if [ -f "$logs/gpu_amortized.log" ]; then
        echo
        echo "Amortized image explainer (benchmarks/amortized.py --only images --device cuda):"
        echo
        echo '```'
        grep -vE "Warning|warn|^ *exact = |^$" "$logs/gpu_amortized.log" | tail -n 16
        echo '```'
    fi
    if [ -n "${failures:-}" ]; then echo; echo -e "Failed steps:${failures}"; fi
} >> "$out"
echo "== table: $out"
cat "$out"
exit $status
