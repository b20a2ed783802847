# The tiny Mixtral-shaped MoE the MoE e2e tests share (test_moe.sh, test_moe_ep.sh): its flags, the
# Qwen-style variant's, and the parity check against the single process. Sourced after common.sh.
moe=(--set model.norm=rmsnorm --set model.position=rope --set model.activation=swiglu --set model.bias=false
     --set model.tie_embeddings=false --set model.d_ff=48 --set model.moe.num_experts=4 --set model.moe.top_k=2
     --set model.moe.aux_loss_coef=0.01 --set model.moe.z_loss_coef=0.001 --set model.dropout=0
     --set model.n_layers=3 --set train.max_steps=20 --set schedule.total_steps=20 --set train.micro_batch_size=4)
qwen=(--set model.moe.router=softmax_topk --set model.moe.normalize=true --set model.moe.shared_experts=1
      --set model.moe.first_dense=1 --set model.moe.bias_update_rate=0.001 --set model.moe.d_ff=24)
# Layout parity: losses within 1e-5, clipped gradient norms within 1e-3 relative (not 1e-4 as for dense
# models: a token whose top-k scores tie to rounding can pick another expert in another layout, which moves
# that step's gradient more than its loss).
same_moe_curve() {  # same_moe_curve REFERENCE_RUN RUN LABEL
  same_losses_within "$1" "$2" "$3" 1e-5
  same_grad_norms "$1" "$2" "$3" 1e-3
}
moe_mpi() {  # moe_mpi RANKS RUN_DIR [--set ...]
  local ranks=$1 dir=$2; shift 2
  mpi_train "$ranks" "$dir" "${moe[@]}" --set parallel.dp=-1 "$@" || fail "$(basename "$dir") failed"
}

