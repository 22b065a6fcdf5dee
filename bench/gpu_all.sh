#!/usr/bin/env bash
# Every GPU check of commviz in one go, for a machine with a GPU, torch with CUDA, and commviz's
# dependencies importable (textual is not needed). Each step is bounded; its output goes to
# ${OUT:-/tmp/commviz-gpu}/NAME.txt. About three minutes on one H200. Run from the repository
# root: bash bench/gpu_all.sh
out=${OUT:-/tmp/commviz-gpu}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
step() {  # step NAME SECONDS CMD...: run one check, keep its output, say how it ended
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    echo "=== $name: $*"
    timeout "$limit" "$@" >"$out/$name.txt" 2>&1
    local rc=$?
    tail -n 25 "$out/$name.txt"
    echo "=== $name: exit $rc after $((SECONDS - start)) s"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
step gpu_check 60 python3 bench/gpu_check.py
step demo_ddp 40 python3 -m commviz demo ddp --ranks 1 --backend nccl --headless --iters 5 \
    --interval 0.2 --record "$out/demo_ddp.jsonl"
step demo_fsdp 40 python3 -m commviz demo fsdp --ranks 1 --backend nccl --headless --iters 5 \
    --interval 0.2
step ddp_gpu 60 python3 bench/overhead.py --ddp-only --ddp-device cuda --hidden 4096 \
    --batch 1024 --ddp-rounds 6 --ddp-steps 5
step all_reduce_cpu 45 python3 bench/overhead.py --rounds 20 --ddp-rounds 0
