// The optimizer family (Kernels.Adam, SGD): cuda/host/optim.go's update,
// element by element.
#pragma once
#include "common.cuh"
#include "quant.cuh" // the 8-bit code maps and their search (Adam8bit)

// adam: cuda/host/optim.go's adamKernel, element by element. pb is the master
// copy when there is one (then param = pb rounded), else param itself. c1
// and c2 are cuda.AdamArgs.Corrections, 1/(1-β1^t) and 1/sqrt(1-β2^t).
template <typename T>
__device__ void adam(void *param, i64 pdt, const void *grad, i64 gdt, void *pb, i64 pbdt, void *m, i64 mdt, void *v,
                     i64 vdt, i64 n, double lr_, double b1_, double b2_, double eps_, double wd_, double gs_,
                     double c1_, double c2_, i64 decoupled, i64 has_master) {
	T lr = (T)lr_, b1 = (T)b1_, b2 = (T)b2_, eps = (T)eps_, wd = (T)wd_, gs = (T)gs_, c1 = (T)c1_, c2 = (T)c2_;
	GRID_STRIDE(i, n) {
		T p = ld<T>(pb, pbdt, i), g = ld<T>(grad, gdt, i) * gs;
		if (!decoupled) g += wd * p;
		T mi = b1 * ld<T>(m, mdt, i) + (1 - b1) * g;
		T vi = b2 * ld<T>(v, vdt, i) + (1 - b2) * g * g;
		st(m, mdt, i, mi);
		st(v, vdt, i, vi);
		T upd = (mi * c1) / ((T)sqrt((double)vi) * c2 + eps);
		if (decoupled) upd += wd * p;
		p = p - lr * upd;
		st(pb, pbdt, i, p);
		if (has_master) st(param, pdt, i, p);
	}
}

template <typename T>
__device__ void sgd(void *param, i64 pdt, const void *grad, i64 gdt, void *pb, i64 pbdt, void *mom, i64 mdt, i64 n,
                    double lr_, double mu_, double wd_, double gs_, i64 has_mom, i64 has_master) {
	T lr = (T)lr_, mu = (T)mu_, wd = (T)wd_, gs = (T)gs_;
	GRID_STRIDE(i, n) {
		T p = ld<T>(pb, pbdt, i);
		T g = ld<T>(grad, gdt, i) * gs + wd * p;
		if (has_mom) {
			T mi = mu * ld<T>(mom, mdt, i) + g;
			st(mom, mdt, i, mi);
			g = mi;
		}
		p -= lr * g;
		st(pb, pbdt, i, p);
		if (has_master) st(param, pdt, i, p);
	}
}

// adam8bit: cuda/host/optim.go's adam8bitKernel, one block of BLOCK8
// elements a thread, in two passes: the first updates each element's m
// and v (not stored) for the block's new scales, the second updates them
// again, the same arithmetic, with the weight, and stores all.
template <typename T>
__device__ void adam8bit(void *param, i64 pdt, const void *grad, i64 gdt, void *pb, i64 pbdt, void *m, i64 mdt, void *v,
                         i64 vdt, void *ms, i64 msdt, void *vs, i64 vsdt, i64 n, double lr_, double b1_, double b2_,
                         double eps_, double wd_, double gs_, double c1_, double c2_, i64 decoupled, i64 has_master) {
	T lr = (T)lr_, b1 = (T)b1_, b2 = (T)b2_, eps = (T)eps_, wd = (T)wd_, gs = (T)gs_, c1 = (T)c1_, c2 = (T)c2_;
	unsigned char *mc = (unsigned char *)m, *vc = (unsigned char *)v;
	float *msc = (float *)ms, *vsc = (float *)vs;
	const float *mmap = CODE_MAPS[0], *vmap = CODE_MAPS[1];
	i64 nb = (n + BLOCK8 - 1) / BLOCK8;
	GRID_STRIDE(b, nb) {
		i64 i0 = b * BLOCK8, len = n - i0 < BLOCK8 ? n - i0 : BLOCK8;
		T mscale = (T)msc[b], vscale = (T)vsc[b];
		float mmax = 0, vmax = 0;
		for (int pass = 0; pass < 2; pass++) {
			for (i64 k = 0; k < len; k++) {
				i64 i = i0 + k;
				T p = ld<T>(pb, pbdt, i), g = ld<T>(grad, gdt, i) * gs;
				if (!decoupled) g += wd * p;
				T mi = b1 * ((T)mmap[mc[i]] * mscale) + (1 - b1) * g;
				T vi = b2 * ((T)vmap[vc[i]] * vscale) + (1 - b2) * g * g;
				if (pass == 0) {
					mmax = max(mmax, (float)(mi < 0 ? -mi : mi));
					vmax = max(vmax, (float)(vi < 0 ? -vi : vi));
					continue;
				}
				T upd = (mi * c1) / ((T)sqrt((double)vi) * c2 + eps);
				if (decoupled) upd += wd * p;
				p = p - lr * upd;
				st(pb, pbdt, i, p);
				if (has_master) st(param, pdt, i, p);
				// The new codes (cuda/host/optim.go's requantize8).
				unsigned char c = quantize8(mmap, mmax == 0 ? 0.0f : (float)mi / mmax);
				if (signbit(mmap[c]) != signbit((float)mi)) c = mi > 0 ? c + 1 : c - 1;
				mc[i] = c;
				vc[i] = quantize8(vmap, vmax == 0 ? 0.0f : (float)vi / vmax);
			}
		}
		msc[b] = mmax;
		vsc[b] = vmax;
	}
}

ENTRY2(adam8bit,
       (void *param, i64 pdt, const void *grad, i64 gdt, void *pb, i64 pbdt, void *m, i64 mdt, void *v, i64 vdt, void *ms,
        i64 msdt, void *vs, i64 vsdt, i64 n, double lr, double b1, double b2, double eps, double wd, double gs, double c1,
        double c2, i64 decoupled, i64 has_master),
       (param, pdt, grad, gdt, pb, pbdt, m, mdt, v, vdt, ms, msdt, vs, vsdt, n, lr, b1, b2, eps, wd, gs, c1, c2, decoupled,
        has_master))
ENTRY2(adam,
       (void *param, i64 pdt, const void *grad, i64 gdt, void *pb, i64 pbdt, void *m, i64 mdt, void *v, i64 vdt, i64 n,
        double lr, double b1, double b2, double eps, double wd, double gs, double c1, double c2, i64 decoupled,
        i64 has_master),
       (param, pdt, grad, gdt, pb, pbdt, m, mdt, v, vdt, n, lr, b1, b2, eps, wd, gs, c1, c2, decoupled, has_master))
ENTRY2(sgd,
       (void *param, i64 pdt, const void *grad, i64 gdt, void *pb, i64 pbdt, void *mom, i64 mdt, i64 n, double lr,
        double mu, double wd, double gs, i64 has_mom, i64 has_master),
       (param, pdt, grad, gdt, pb, pbdt, mom, mdt, n, lr, mu, wd, gs, has_mom, has_master))
