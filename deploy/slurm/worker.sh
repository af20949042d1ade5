#!/bin/bash
# One Sailor worker agent on this Slurm node (started by sailor.sbatch through srun): its GPU
# type and count come from the node's GRES, its address from the node's NodeAddr.
set -euo pipefail
node=${SLURMD_NODENAME:-$(hostname -s)}
address=$(scontrol show node -o "$node" | tr ' ' '\n' | sed -n 's/^NodeAddr=//p')
read -r -a gpus <<<"$(sailor slurm-node --node "$node")"
tls=()
[[ -n "${SAILOR_TLS_CERT:-}" ]] && tls+=(--tls-cert "$SAILOR_TLS_CERT" --tls-key "$SAILOR_TLS_KEY")
[[ -n "${SAILOR_TLS_CA:-}" ]] && tls+=(--tls-ca "$SAILOR_TLS_CA")
exec sailor worker --controller "$SAILOR_CONTROLLER" "${gpus[@]}" --zone "${SAILOR_ZONE:-local}" \
  --host 0.0.0.0 --port "$SAILOR_AGENT_PORT" --advertise-host "${address:-$node}" \
  --worker-id "$node" --workdir "$SAILOR_RUN_DIR/workers" "${tls[@]}"
