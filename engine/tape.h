// The autograd tape: while a TapeScope is open, every op whose inputs need gradients
// records one entry (inputs, output, backward closure); backward() walks them in reverse.
#pragma once

#include <functional>
#include <string>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/tensor.h"

namespace engine {

// Given the gradient of the op's output, returns one gradient per input (undefined where
// the input needs none). Saved tensors are captured by the closure and freed with it.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

class Tape {
 public:
  // What an entry remembers of an input: enough to route its gradient, without keeping a
  // non-leaf input alive (the backward closure keeps exactly the tensors it needs, so an
  // activation no backward reads is freed after forward). Leaves are held: their gradient is
  // stored on them.
  struct InputRef {
    uint64_t node = 0;                 // the producing recording (non-leaf inputs)
    std::shared_ptr<TensorImpl> leaf;  // leaves that want a gradient
    Shape shape;
    DType dtype = DType::F32;
    bool requires_grad = false;
  };
  struct Entry {
    const char* op;
    std::vector<InputRef> inputs;
    uint64_t output_node;  // its output's recording number: the gradient map's key
    BackwardFn backward;
    // The layer whose forward recorded it, or null: points into the names of the NumericsHooks
    // installed then, so backward must run while those hooks still exist (the trainer's do).
    const std::string* layer;
  };

  void record(const char* op, std::vector<Tensor> inputs, Tensor& output, BackwardFn backward);

  // Seeds d(root) = grad_root (ones when undefined; root must then have one element),
  // runs every entry in reverse, accumulates leaf gradients into Tensor::grad(), and
  // frees each entry's saved tensors as soon as it has run. The tape is empty afterwards.
  void backward(const Tensor& root, const Tensor& grad_root = Tensor());

  // Called during backward() with each leaf once its gradient is final: after the last entry
  // that reads it has run (or been passed over). Data-parallel training starts reducing a
  // bucket of gradients from here while the rest of backward runs (engine/distributed.h).
  // A leaf read only by entries that got no gradient is reported as those are passed over.
  std::function<void(const Tensor& leaf)> on_grad_ready;

  void clear() { entries_.clear(); }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<Entry> entries_;
};

// The tape ops record into, or nullptr (inference: nothing recorded).
Tape* active_tape();

class TapeScope {
 public:
  explicit TapeScope(Tape& tape);
  ~TapeScope();
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  Tape* saved_;
};

// Like torch.no_grad(): nothing is recorded inside, even with a tape open.
class NoGradScope {
 public:
  NoGradScope();
  ~NoGradScope();
  NoGradScope(const NoGradScope&) = delete;
  NoGradScope& operator=(const NoGradScope&) = delete;

 private:
  Tape* saved_;
};

// True when an op with these inputs must record itself.
bool should_record(std::initializer_list<const Tensor*> inputs);

}  // namespace engine
