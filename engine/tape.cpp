// Tape recording and the reverse walk that accumulates gradients.
#include "engine/tape.h"

#include "engine/numerics.h"
#include "engine/ops.h"

namespace engine {

namespace {
thread_local Tape* t_active_tape = nullptr;
}

Tape* active_tape() { return t_active_tape; }

TapeScope::TapeScope(Tape& tape) : saved_(t_active_tape) { t_active_tape = &tape; }
TapeScope::~TapeScope() { t_active_tape = saved_; }
NoGradScope::NoGradScope() : saved_(t_active_tape) { t_active_tape = nullptr; }
NoGradScope::~NoGradScope() { t_active_tape = saved_; }

bool should_record(std::initializer_list<const Tensor*> inputs) {
  if (!t_active_tape) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

void Tape::record(const char* op, std::vector<Tensor> inputs, Tensor& output, BackwardFn backward) {
  output.impl()->requires_grad = true;
  output.impl()->from_op = true;
  const NumericsHooks* hooks = numerics_hooks();
  entries_.push_back(Entry{op, std::move(inputs), output.shared_impl(), output.impl(), std::move(backward),
                           hooks ? current_layer() : nullptr});
  if (hooks && hooks->anomaly) check_anomaly(op, current_layer(), "forward", output);
}

void Tape::backward(const Tensor& root, const Tensor& grad_root) {
  ENGINE_CHECK(root.defined() && root.requires_grad(),
               "backward: the root tensor does not require grad (was a tape open, and does it depend on a parameter?)");
  NoGradScope no_record;  // backward closures run ops; none of them may land on this tape
  Tensor seed = grad_root;
  if (!seed.defined()) {
    ENGINE_CHECK(root.numel() == 1, "backward: root " << root.desc() << " is not a scalar; pass its gradient");
    seed = Tensor::full(root.shape(), 1.0, root.dtype(), root.device());
  }
  ENGINE_CHECK(seed.shape() == root.shape() && seed.dtype() == root.dtype(),
               "backward: gradient " << seed.desc() << " does not match root " << root.desc());

  // Gradients of non-leaf tensors, keyed by identity, dropped as soon as they are consumed.
  // Each holds its tensor too: once a consumer's entry has run and let go of its inputs,
  // this keeps the tensor (and so its producer's entry) alive until the gradient is used.
  struct Pending { Tensor tensor, grad; };
  std::unordered_map<const TensorImpl*, Pending> pending;
  auto accumulate = [&](const Tensor& x, const Tensor& g, const char* op) {
    ENGINE_CHECK(g.shape() == x.shape() && g.dtype() == x.dtype(),
                 "backward of " << op << ": gradient " << g.desc() << " for input " << x.desc());
    if (x.is_leaf()) {
      Tensor kept = x.grad();
      if (!kept.defined()) {
        kept = Tensor::empty(x.shape(), x.dtype(), x.device(), MemKind::Gradients);
        kept.copy_from(g);
        const_cast<Tensor&>(x).set_grad(kept);
      } else {
        add_into(kept, g);  // gradients of leaves persist and sum until zeroed
      }
      return;
    }
    auto it = pending.find(x.impl());
    if (it == pending.end()) {
      pending.emplace(x.impl(), Pending{x, g});
    } else {
      it->second.grad = add(it->second.grad, g);  // out of place: g may be shared with another input
    }
  };

  if (root.is_leaf()) {
    accumulate(root, seed, "root");
    if (on_grad_ready) on_grad_ready(root);
    entries_.clear();
    return;
  }
  // For on_grad_ready: how many entries still to walk read each leaf that wants a gradient.
  std::unordered_map<const TensorImpl*, int> leaf_uses;
  if (on_grad_ready)
    for (const Entry& e : entries_)
      for (const Tensor& x : e.inputs)
        if (x.requires_grad() && x.is_leaf()) ++leaf_uses[x.impl()];
  // After entry e has run or been passed over: its leaves with no reader left are final.
  auto release_leaves = [&](const Entry& e) {
    for (const Tensor& x : e.inputs) {
      if (!x.requires_grad() || !x.is_leaf()) continue;
      auto u = leaf_uses.find(x.impl());
      if (u != leaf_uses.end() && --u->second == 0) {
        leaf_uses.erase(u);
        on_grad_ready(x);
      }
    }
  };
  pending.emplace(root.impl(), Pending{root, seed});
  for (auto e = entries_.rbegin(); e != entries_.rend(); ++e) {
    auto it = pending.find(e->output_key);
    // Same address, same tensor? (An expired output's address may have been reused.)
    const bool has_grad = it != pending.end() && !e->output.owner_before(it->second.tensor.shared_impl()) &&
                          !it->second.tensor.shared_impl().owner_before(e->output);
    if (!has_grad) {
      if (on_grad_ready) release_leaves(*e);
      continue;
    }
    Tensor grad_out = std::move(it->second.grad);
    pending.erase(it);
    std::vector<Tensor> grads = e->backward(grad_out);
    ENGINE_CHECK(grads.size() == e->inputs.size(), "backward of " << e->op << " returned " << grads.size()
                                                                  << " gradients for " << e->inputs.size() << " inputs");
    if (const NumericsHooks* hooks = numerics_hooks(); hooks && hooks->anomaly)
      for (const Tensor& g : grads) check_anomaly(e->op, e->layer, "backward", g);
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined() && e->inputs[i].requires_grad()) accumulate(e->inputs[i], grads[i], e->op);
    }
    if (on_grad_ready) release_leaves(*e);
    e->backward = nullptr;  // frees the saved tensors now, not at the end
    e->inputs.clear();
  }
  entries_.clear();
}

}  // namespace engine
