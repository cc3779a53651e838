// Element-wise reduction kernels, the only place that knows how each dtype combines.
#pragma once
#include <cstddef>
#include "common/dtype.h"

namespace hs {

// dst[i] = a[i] (op) b[i] for i < count. dst may alias a or b. op is Sum, Min, Max or Product
// (Average is Sum followed by scale_buffer; the caller decides the factor).
// float16/bfloat16 are computed in float32 and rounded back (round-to-nearest-even).
// bool: Sum and Max are logical or, Min and Product logical and.
void reduce_buffers(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op);

// buf[i] *= factor, computed in double for int32/int64/float64 and float otherwise; integers are
// rounded toward zero (Horovod's behaviour for integer Average). No-op when factor == 1.
void scale_buffer(void* buf, size_t count, DataType dtype, double factor);

}  // namespace hs
