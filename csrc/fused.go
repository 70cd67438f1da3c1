package csrc

/*
#include "lanpo.h"
*/
import "C"

import (
	"unsafe"

	"github.com/sugarme/gotch/ts"
)

// The fused kernels of the model's forward (fused.cpp, cuda/fused.cu): one
// kernel each on CPU and CUDA, differentiable, rounding to the dtype where the
// ATen composition they replace does. x, residual, gate and up must be
// contiguous; weights and biases share x's dtype.

func optHandle(t *ts.Tensor) C.lanpo_tensor {
	if t == nil {
		return nil
	}
	return handle(t)
}

func fromC(t C.lanpo_tensor) *ts.Tensor { return ts.FromCtensor(unsafe.Pointer(t)) }

// AddRMSNorm returns y = RMSNorm(h) and h = x + residual (rounded to the
// dtype): a pre-norm block's residual add and the next norm in one pass.
func AddRMSNorm(x, residual, weight *ts.Tensor, eps float64) (y, h *ts.Tensor, err error) {
	var cy, ch C.lanpo_tensor
	if err := takeError(C.lanpo_add_rms_norm(handle(x), handle(residual), handle(weight), C.double(eps), &cy, &ch)); err != nil {
		return nil, nil, err
	}
	return fromC(cy), fromC(ch), nil
}

// Rope maps the projections q [B, T, hq·D], k and v [B, T, hkv·D] (plus their
// biases, nil for none) to attention's [B, heads, T, D], q and k rotated at
// positions pos [B, T] (int64) with the tables cos, sin [P, D] (fp32): what
// transformers computes with view, transpose and apply_rotary_pos_emb, bit
// for bit when the biases are already in the projections. Biases given here
// are added in the kernel, one rounding more than a projection's addmm (the
// model keeps them in its projections). A position outside the tables is an
// error on CPU; on CUDA, which cannot check without a sync, it is clamped.
func Rope(q, k, v, bq, bk, bv, cos, sin, pos *ts.Tensor, hq, hkv int64) (oq, ok, ov *ts.Tensor, err error) {
	var cq, ck, cv C.lanpo_tensor
	if err := takeError(C.lanpo_rope(handle(q), handle(k), handle(v), optHandle(bq), optHandle(bk), optHandle(bv),
		handle(cos), handle(sin), handle(pos), C.int64_t(hq), C.int64_t(hkv), &cq, &ck, &cv)); err != nil {
		return nil, nil, nil, err
	}
	return fromC(cq), fromC(ck), fromC(cv), nil
}

// SwiGLU returns silu(gate) · up.
func SwiGLU(gate, up *ts.Tensor) (*ts.Tensor, error) {
	var out C.lanpo_tensor
	if err := takeError(C.lanpo_swiglu(handle(gate), handle(up), &out)); err != nil {
		return nil, err
	}
	return fromC(out), nil
}
