// Tape recording and the reverse walk that accumulates gradients.
#include "engine/tape.h"

#include <atomic>

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

namespace {
std::atomic<uint64_t> g_next_node{1};  // unique over all tapes, so a number is never reused
}

void Tape::record(const char* op, std::vector<Tensor> inputs, Tensor& output, BackwardFn backward) {
  output.impl()->requires_grad = true;
  output.impl()->from_op = true;
  output.impl()->node = g_next_node.fetch_add(1, std::memory_order_relaxed);
  std::vector<InputRef> refs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined()) continue;
    InputRef& r = refs[i];
    r.requires_grad = x.requires_grad();
    r.shape = x.shape();
    r.dtype = x.dtype();
    if (x.is_leaf()) {
      if (r.requires_grad) r.leaf = x.shared_impl();
    } else {
      r.node = x.impl()->node;
    }
  }
  const NumericsHooks* hooks = numerics_hooks();
  entries_.push_back(Entry{op, std::move(refs), output.impl()->node, std::move(backward),
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

  // Gradients of non-leaf tensors, keyed by the recording that produced them, dropped as soon as
  // that entry has consumed them. Leaves accumulate into Tensor::grad() and persist until zeroed.
  std::unordered_map<uint64_t, Tensor> pending;
  auto accumulate = [&](const InputRef& x, const Tensor& g, const char* op) {
    ENGINE_CHECK(g.shape() == x.shape && g.dtype() == x.dtype,
                 "backward of " << op << ": gradient " << g.desc() << " for an input of "
                                << dtype_name(x.dtype) << shape_str(x.shape));
    if (x.leaf) {
      Tensor leaf(x.leaf);
      Tensor kept = leaf.grad();
      if (!kept.defined()) {
        kept = Tensor::empty(x.shape, x.dtype, g.device(), MemKind::Gradients);
        kept.copy_from(g);
        leaf.set_grad(kept);
      } else {
        add_into(kept, g);  // gradients of leaves persist and sum until zeroed
      }
      return;
    }
    auto it = pending.find(x.node);
    if (it == pending.end()) {
      pending.emplace(x.node, g);
    } else {
      it->second = add(it->second, g);  // out of place: g may be shared with another input
    }
  };

  if (root.is_leaf()) {
    InputRef r;
    r.leaf = root.shared_impl();
    r.shape = root.shape();
    r.dtype = root.dtype();
    r.requires_grad = true;
    accumulate(r, seed, "root");
    if (on_grad_ready) on_grad_ready(root);
    entries_.clear();
    return;
  }
  // For on_grad_ready: how many entries still to walk read each leaf that wants a gradient.
  std::unordered_map<const TensorImpl*, int> leaf_uses;
  if (on_grad_ready)
    for (const Entry& e : entries_)
      for (const InputRef& x : e.inputs)
        if (x.leaf) ++leaf_uses[x.leaf.get()];
  // After entry e has run or been passed over: its leaves with no reader left are final.
  auto release_leaves = [&](const Entry& e) {
    for (const InputRef& x : e.inputs) {
      if (!x.leaf) continue;
      auto u = leaf_uses.find(x.leaf.get());
      if (u != leaf_uses.end() && --u->second == 0) {
        leaf_uses.erase(u);
        on_grad_ready(Tensor(x.leaf));
      }
    }
  };
  pending.emplace(root.impl()->node, seed);
  for (auto e = entries_.rbegin(); e != entries_.rend(); ++e) {
    auto it = pending.find(e->output_node);
    if (it == pending.end()) {  // an output nobody used: no gradient flows through this entry
      if (on_grad_ready) release_leaves(*e);
      continue;
    }
    Tensor grad_out = std::move(it->second);
    pending.erase(it);
    std::vector<Tensor> grads = e->backward(grad_out);
    ENGINE_CHECK(grads.size() == e->inputs.size(), "backward of " << e->op << " returned " << grads.size()
                                                                  << " gradients for " << e->inputs.size() << " inputs");
    if (const NumericsHooks* hooks = numerics_hooks(); hooks && hooks->anomaly)
      for (const Tensor& g : grads) check_anomaly(e->op, e->layer, "backward", g);
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined() && e->inputs[i].requires_grad) accumulate(e->inputs[i], grads[i], e->op);
    }
    if (on_grad_ready) release_leaves(*e);
    e->backward = nullptr;  // frees the saved tensors now, not at the end
    e->inputs.clear();
  }
  entries_.clear();
}

}  // namespace engine
