#pragma once
// The gradients of a model summed across the processes of a data-parallel run, in a few large
// MPI_Allreduce calls rather than one per tensor: the parameters are cut, in their order, into
// buckets of about `bucket_bytes`, each packed into one flat float32 buffer, reduced in place and
// unpacked. Every process then holds the same summed gradient, bit for bit (one MPI_Allreduce gives
// every process the same result), so the same clipping and Adam step keep their weights equal.
//
// The reduction runs after backward, not during it: Open MPI moves a large message forward only
// inside MPI calls (there is no progress thread), and backward keeps every core busy, so a
// nonblocking reduction started from a gradient hook would still do its work at the wait.
#include <cstddef>
#include <vector>

#include "autograd/variable.h"

namespace gf::train::distributed {

class GradientBuckets {
 public:
  static constexpr size_t kDefaultBucketBytes = size_t{25} << 20;  // 25 MiB: few calls, bounded extra memory

  // Throws std::invalid_argument naming a parameter that is not float32.
  explicit GradientBuckets(std::vector<Variable> params, size_t bucket_bytes = kDefaultBucketBytes);

  // Sums every parameter's .grad over the processes. A parameter without a gradient on this
  // process (its part of the batch was empty) counts as zeros, and gets the sum as its gradient.
  void allreduce();

  size_t buckets() const { return buckets_.size(); }
  size_t bytes() const;        // float32 bytes reduced per call
  double seconds() const { return seconds_; }  // in allreduce() so far: packing, MPI and unpacking

 private:
  struct Bucket {
    size_t first = 0, last = 0;  // parameters [first, last)
    std::vector<float> flat;     // (sum of their numel,)
  };
  void pack(Bucket& b) const;
  void unpack(const Bucket& b);

  std::vector<Variable> params_;
  std::vector<Bucket> buckets_;
  double seconds_ = 0;
};

}  // namespace gf::train::distributed
