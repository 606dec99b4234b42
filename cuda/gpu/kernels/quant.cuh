// The quantization family (Kernels.QuantizeNF4, DequantizeNF4,
// QuantizeBlockwise, DequantizeBlockwise): cuda/host/quant.go's kernels,
// one block of values a thread (bitsandbytes' formats, cuda/quant.go).
#pragma once
#include "common.cuh"

#define NF4_BLOCK 64 // cuda.NF4Block
#define BLOCK8 256   // cuda.Block8
#define NF4_ZERO 7   // cuda.NF4Zero: the code of 0.0

// NF4's 16 values (cuda.NF4Values; each exact in fp32).
__constant__ float NF4_VALUES[16] = {
	-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f
};

// The 8-bit code maps by cuda.CodeMap: dynamic (signed), dynamic_unsigned
// (cuda.CodeMap.Values, which cuda/quant_test.go checks this table against).
__constant__ float CODE_MAPS[2][256] = {
	{
		-0.992968738f, -0.978906214f, -0.96484375f, -0.950781226f, -0.936718702f, -0.922656238f,
		-0.908593774f, -0.89453125f, -0.880468726f, -0.866406202f, -0.852343738f, -0.838281214f,
		-0.82421875f, -0.810156226f, -0.796093702f, -0.782031238f, -0.767968774f, -0.75390625f,
		-0.739843786f, -0.725781262f, -0.711718798f, -0.697656274f, -0.68359375f, -0.669531286f,
		-0.655468762f, -0.641406238f, -0.627343774f, -0.61328125f, -0.599218726f, -0.585156262f,
		-0.571093798f, -0.557031274f, -0.54296875f, -0.528906226f, -0.514843762f, -0.500781238f,
		-0.486718774f, -0.47265625f, -0.458593726f, -0.444531262f, -0.430468738f, -0.416406214f,
		-0.40234375f, -0.388281226f, -0.374218762f, -0.360156238f, -0.346093714f, -0.33203125f,
		-0.317968726f, -0.303906262f, -0.289843738f, -0.275781274f, -0.26171875f, -0.247656256f,
		-0.233593762f, -0.219531253f, -0.205468744f, -0.19140625f, -0.177343741f, -0.163281247f,
		-0.149218753f, -0.135156244f, -0.12109375f, -0.107031256f, -0.0985937491f, -0.0957812443f,
		-0.0929687545f, -0.0901562497f, -0.0873437524f, -0.0845312476f, -0.0817187428f, -0.078906253f,
		-0.0760937482f, -0.0732812509f, -0.0704687461f, -0.0676562563f, -0.0648437515f, -0.0620312467f,
		-0.0592187531f, -0.0564062484f, -0.053593751f, -0.05078125f, -0.047968749f, -0.0451562516f,
		-0.0423437469f, -0.0395312496f, -0.0367187522f, -0.0339062475f, -0.0310937501f, -0.0282812472f,
		-0.0254687499f, -0.0226562507f, -0.0198437497f, -0.0170312505f, -0.0142187504f, -0.0114062503f,
		-0.00971874967f, -0.00915624946f, -0.00859375019f, -0.00803124998f, -0.00746874977f, -0.00690625003f,
		-0.00634374982f, -0.00578125007f, -0.00521875033f, -0.00465624966f, -0.00409374991f, -0.00353124971f,
		-0.00296874996f, -0.00240624999f, -0.00184375001f, -0.00128124992f, -0.000943750085f, -0.000831249985f,
		-0.00071875006f, -0.000606250076f, -0.000493750034f, -0.000381250022f, -0.000268750038f, -0.000156250011f,
		-8.87499991e-05f, -6.62500024e-05f, -4.37499984e-05f, -2.12499981e-05f, -7.7499999e-06f, -3.25000019e-06f,
		-5.50000038e-07f, 0.0f, 5.50000038e-07f, 3.25000019e-06f, 7.7499999e-06f, 2.12499981e-05f,
		4.37499984e-05f, 6.62500024e-05f, 8.87499991e-05f, 0.000156250011f, 0.000268750038f, 0.000381250022f,
		0.000493750034f, 0.000606250076f, 0.00071875006f, 0.000831249985f, 0.000943750085f, 0.00128124992f,
		0.00184375001f, 0.00240624999f, 0.00296874996f, 0.00353124971f, 0.00409374991f, 0.00465624966f,
		0.00521875033f, 0.00578125007f, 0.00634374982f, 0.00690625003f, 0.00746874977f, 0.00803124998f,
		0.00859375019f, 0.00915624946f, 0.00971874967f, 0.0114062503f, 0.0142187504f, 0.0170312505f,
		0.0198437497f, 0.0226562507f, 0.0254687499f, 0.0282812472f, 0.0310937501f, 0.0339062475f,
		0.0367187522f, 0.0395312496f, 0.0423437469f, 0.0451562516f, 0.047968749f, 0.05078125f,
		0.053593751f, 0.0564062484f, 0.0592187531f, 0.0620312467f, 0.0648437515f, 0.0676562563f,
		0.0704687461f, 0.0732812509f, 0.0760937482f, 0.078906253f, 0.0817187428f, 0.0845312476f,
		0.0873437524f, 0.0901562497f, 0.0929687545f, 0.0957812443f, 0.0985937491f, 0.107031256f,
		0.12109375f, 0.135156244f, 0.149218753f, 0.163281247f, 0.177343741f, 0.19140625f,
		0.205468744f, 0.219531253f, 0.233593762f, 0.247656256f, 0.26171875f, 0.275781274f,
		0.289843738f, 0.303906262f, 0.317968726f, 0.33203125f, 0.346093714f, 0.360156238f,
		0.374218762f, 0.388281226f, 0.40234375f, 0.416406214f, 0.430468738f, 0.444531262f,
		0.458593726f, 0.47265625f, 0.486718774f, 0.500781238f, 0.514843762f, 0.528906226f,
		0.54296875f, 0.557031274f, 0.571093798f, 0.585156262f, 0.599218726f, 0.61328125f,
		0.627343774f, 0.641406238f, 0.655468762f, 0.669531286f, 0.68359375f, 0.697656274f,
		0.711718798f, 0.725781262f, 0.739843786f, 0.75390625f, 0.767968774f, 0.782031238f,
		0.796093702f, 0.810156226f, 0.82421875f, 0.838281214f, 0.852343738f, 0.866406202f,
		0.880468726f, 0.89453125f, 0.908593774f, 0.922656238f, 0.936718702f, 0.950781226f,
		0.96484375f, 0.978906214f, 0.992968738f, 1.0f,
	},
	{
		0.0f, 3.2500003e-07f, 7.7499999e-07f, 2.12499981e-06f, 4.37499966e-06f, 6.62499997e-06f,
		8.87499937e-06f, 1.56249989e-05f, 2.68750009e-05f, 3.81249993e-05f, 4.93749976e-05f, 6.06250032e-05f,
		7.18750016e-05f, 8.31249927e-05f, 9.43749983e-05f, 0.000128125001f, 0.000184375007f, 0.000240624999f,
		0.00029687502f, 0.000353124982f, 0.000409375003f, 0.000465625024f, 0.000521875045f, 0.000578125007f,
		0.000634375028f, 0.000690625049f, 0.000746875012f, 0.000803125091f, 0.000859375054f, 0.000915625016f,
		0.000971875037f, 0.00114062498f, 0.00142187497f, 0.00170312496f, 0.00198437483f, 0.00226562493f,
		0.00254687481f, 0.00282812468f, 0.00310937478f, 0.00339062465f, 0.00367187499f, 0.00395312486f,
		0.0042343745f, 0.00451562507f, 0.00479687471f, 0.00507812481f, 0.00535937492f, 0.00564062456f,
		0.00592187513f, 0.0062031243f, 0.00648437487f, 0.00676562544f, 0.00704687461f, 0.00732812518f,
		0.00760937436f, 0.00789062493f, 0.0081718741f, 0.0084531242f, 0.00873437524f, 0.00901562441f,
		0.00929687452f, 0.00957812369f, 0.00985937472f, 0.010703126f, 0.0121093756f, 0.0135156242f,
		0.0149218757f, 0.0163281243f, 0.0177343749f, 0.0191406254f, 0.020546874f, 0.0219531264f,
		0.0233593769f, 0.0247656256f, 0.0261718761f, 0.0275781285f, 0.0289843734f, 0.0303906258f,
		0.0317968726f, 0.033203125f, 0.0346093737f, 0.036015626f, 0.0374218784f, 0.0388281234f,
		0.0402343757f, 0.0416406207f, 0.0430468731f, 0.0444531254f, 0.0458593741f, 0.0472656265f,
		0.0486718789f, 0.0500781238f, 0.0514843762f, 0.0528906249f, 0.0542968772f, 0.0557031296f,
		0.057109382f, 0.0585156269f, 0.0599218719f, 0.0613281243f, 0.0627343804f, 0.0641406253f,
		0.0655468777f, 0.0669531301f, 0.068359375f, 0.0697656274f, 0.0711718798f, 0.0725781247f,
		0.0739843771f, 0.0753906295f, 0.0767968819f, 0.0782031268f, 0.0796093717f, 0.0810156241f,
		0.0824218765f, 0.0838281214f, 0.0852343738f, 0.0866406187f, 0.0880468711f, 0.0894531235f,
		0.0908593759f, 0.0922656283f, 0.0936718732f, 0.0950781256f, 0.096484378f, 0.0978906229f,
		0.0992968753f, 0.103515625f, 0.110546872f, 0.117578126f, 0.124609374f, 0.131640613f,
		0.138671875f, 0.145703137f, 0.152734369f, 0.159765631f, 0.166796863f, 0.173828125f,
		0.180859387f, 0.187890619f, 0.194921881f, 0.201953113f, 0.208984375f, 0.216015637f,
		0.223046869f, 0.230078131f, 0.237109393f, 0.244140625f, 0.251171887f, 0.258203119f,
		0.265234381f, 0.272265643f, 0.279296875f, 0.286328137f, 0.293359399f, 0.300390631f,
		0.307421893f, 0.314453125f, 0.321484387f, 0.328515619f, 0.335546851f, 0.342578113f,
		0.349609375f, 0.356640607f, 0.363671869f, 0.370703101f, 0.377734363f, 0.384765625f,
		0.391796887f, 0.398828119f, 0.405859351f, 0.412890613f, 0.419921875f, 0.426953107f,
		0.433984369f, 0.441015631f, 0.448046863f, 0.455078125f, 0.462109387f, 0.469140619f,
		0.476171881f, 0.483203113f, 0.490234375f, 0.497265607f, 0.504296899f, 0.511328101f,
		0.518359303f, 0.525390625f, 0.532421827f, 0.539453149f, 0.546484351f, 0.553515673f,
		0.560546875f, 0.567578137f, 0.574609399f, 0.581640601f, 0.588671923f, 0.595703125f,
		0.602734387f, 0.609765649f, 0.616796851f, 0.623828113f, 0.630859375f, 0.637890577f,
		0.644921899f, 0.651953101f, 0.658984423f, 0.666015625f, 0.673046947f, 0.680078149f,
		0.687109351f, 0.694140673f, 0.701171875f, 0.708203197f, 0.715234399f, 0.722265601f,
		0.729296923f, 0.736328125f, 0.743359327f, 0.750390649f, 0.757421851f, 0.764453173f,
		0.771484375f, 0.778515577f, 0.785546899f, 0.792578101f, 0.799609303f, 0.806640625f,
		0.813671827f, 0.820703149f, 0.827734351f, 0.834765673f, 0.841796875f, 0.848828137f,
		0.855859399f, 0.862890601f, 0.869921923f, 0.876953125f, 0.883984387f, 0.891015649f,
		0.898046851f, 0.905078113f, 0.912109375f, 0.919140577f, 0.926171899f, 0.933203101f,
		0.940234423f, 0.947265625f, 0.954296947f, 0.961328149f, 0.968359351f, 0.975390673f,
		0.982421875f, 0.989453197f, 0.996484399f, 1.0f,
	},
};

// nf4_code is the NF4 code of a normalized value: how many midpoints
// between neighbouring values it is strictly above (bitsandbytes'
// dQuantizeNF4), the midpoints worked out in fp64 and rounded to T.
template <typename T> __device__ __forceinline__ unsigned nf4_code(T v) {
	unsigned c = 0;
	for (int i = 0; i < 15; i++)
		if (v > (T)(((double)NF4_VALUES[i] + (double)NF4_VALUES[i + 1]) * 0.5)) c++;
	return c;
}

// quantize_nf4: block b's absmax, then its codes, two a byte, the first in
// the high four bits (cuda/host/quant.go's quantizeNF4).
template <typename T>
__device__ void quantize_nf4(void *codes, i64 cdt, void *absmax, i64 adt, const void *x, i64 xdt, i64 n) {
	unsigned char *q = (unsigned char *)codes;
	i64 nb = (n + NF4_BLOCK - 1) / NF4_BLOCK;
	GRID_STRIDE(b, nb) {
		i64 i0 = b * NF4_BLOCK, len = n - i0 < NF4_BLOCK ? n - i0 : NF4_BLOCK;
		T m = 0;
		for (i64 k = 0; k < len; k++) {
			T v = ld<T>(x, xdt, i0 + k);
			m = max(m, v < 0 ? -v : v);
		}
		((float *)absmax)[b] = (float)m;
		T inv = (T)1 / m;
		for (i64 k = 0; k < len; k += 2) {
			unsigned hi = m == 0 ? NF4_ZERO : nf4_code<T>(ld<T>(x, xdt, i0 + k) * inv);
			unsigned lo = m == 0 || k + 1 >= len ? NF4_ZERO : nf4_code<T>(ld<T>(x, xdt, i0 + k + 1) * inv);
			q[(i0 + k) / 2] = (unsigned char)(hi << 4 | lo);
		}
	}
}

// dequantize_nf4: y = NF4_VALUES[code]·absmax[block] in T, stored to y's
// type.
template <typename T>
__device__ void dequantize_nf4(void *y, i64 ydt, const void *codes, i64 cdt, const void *absmax, i64 adt, i64 n) {
	const unsigned char *q = (const unsigned char *)codes;
	GRID_STRIDE(i, n) {
		unsigned c = q[i / 2];
		c = (i % 2 == 0 ? c >> 4 : c) & 15;
		st(y, ydt, i, (T)NF4_VALUES[c] * (T)((const float *)absmax)[i / NF4_BLOCK]);
	}
}

// quantize8 is bitsandbytes' dQuantize (not stochastic): a binary search
// of the map from its middle, then the nearer of the two values it ends
// between (cuda/host/quant.go's quantize8).
__device__ unsigned char quantize8(const float *code, float x) {
	int pivot = 127, upper_pivot = 255, lower_pivot = 0;
	float lower = -1.0f, upper = 1.0f, val = code[pivot];
	for (int i = 64; i > 0; i >>= 1) {
		if (x > val) {
			lower_pivot = pivot;
			lower = val;
			pivot += i;
		} else {
			upper_pivot = pivot;
			upper = val;
			pivot -= i;
		}
		val = code[pivot];
	}
	if (upper_pivot == 255) upper = code[upper_pivot];
	if (lower_pivot == 0) lower = code[lower_pivot];
	if (x > val) return (unsigned char)(x > __fmul_rn(__fadd_rn(upper, val), 0.5f) ? upper_pivot : pivot);
	return (unsigned char)(x < __fmul_rn(__fadd_rn(lower, val), 0.5f) ? lower_pivot : pivot);
}

// blockwise_mean: offset[0] = the mean of x rounded once to fp32, by one
// block of threads: fp64 partial sums in a fixed tree. (Its shared memory
// is an inline function's static, as a template's is: one symbol the
// emulator can find, not a local one.)
__device__ __forceinline__ void mean_f32(void *offset, const float *x, i64 n) {
	__shared__ double sh[32];
	double s = 0;
	for (i64 i = threadIdx.x; i < n; i += blockDim.x) s += (double)x[i];
	s = block_sum(s, sh);
	if (threadIdx.x == 0) ((float *)offset)[0] = n > 0 ? (float)(s / (double)n) : 0.0f;
}

extern "C" __global__ void blockwise_mean(void *offset, i64 odt, const void *x, i64 xdt, i64 n) {
	mean_f32(offset, (const float *)x, n);
}

// quantize_blockwise: block b's values less the offset (when has_offset)
// in fp32, their absmax, then each one's code in the map.
extern "C" __global__ void quantize_blockwise(void *codes, i64 cdt, void *absmax, i64 adt, const void *offset, i64 odt,
                                              i64 has_offset, const void *x, i64 xdt, i64 n, i64 map) {
	const float *xs = (const float *)x, *code = CODE_MAPS[map];
	float off = has_offset ? ((const float *)offset)[0] : 0.0f;
	i64 nb = (n + BLOCK8 - 1) / BLOCK8;
	GRID_STRIDE(b, nb) {
		i64 i0 = b * BLOCK8, len = n - i0 < BLOCK8 ? n - i0 : BLOCK8;
		float m = 0;
		for (i64 k = 0; k < len; k++) {
			float v = __fsub_rn(xs[i0 + k], off);
			m = max(m, v < 0 ? -v : v);
		}
		((float *)absmax)[b] = m;
		float inv = 1.0f / m;
		for (i64 k = 0; k < len; k++) {
			float v = m == 0 ? 0.0f : __fmul_rn(__fsub_rn(xs[i0 + k], off), inv);
			((unsigned char *)codes)[i0 + k] = quantize8(code, v);
		}
	}
}

// dequantize_blockwise: y = map[code]·absmax[block] (+ offset), the
// product rounded before the sum.
extern "C" __global__ void dequantize_blockwise(void *y, i64 ydt, const void *codes, i64 cdt, const void *absmax, i64 adt,
                                                const void *offset, i64 odt, i64 has_offset, i64 n, i64 map) {
	const float *code = CODE_MAPS[map];
	float off = has_offset ? ((const float *)offset)[0] : 0.0f;
	GRID_STRIDE(i, n) {
		float v = __fmul_rn(code[((const unsigned char *)codes)[i]], ((const float *)absmax)[i / BLOCK8]);
		((float *)y)[i] = has_offset ? __fadd_rn(v, off) : v;
	}
}

ENTRY2(quantize_nf4, (void *codes, i64 cdt, void *absmax, i64 adt, const void *x, i64 xdt, i64 n),
       (codes, cdt, absmax, adt, x, xdt, n))
ENTRY2(dequantize_nf4, (void *y, i64 ydt, const void *codes, i64 cdt, const void *absmax, i64 adt, i64 n),
       (y, ydt, codes, cdt, absmax, adt, n))
