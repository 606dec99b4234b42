#include "textflag.h"

// func adamAVX2(p, gr, m, v *float32, n int, k *AdamConsts)
//
// AdamConsts: GS 0, WD 4, B1 8, OneMinusB1 12, B2 16, OneMinusB2 20, C1 24,
// C2 28, Eps 32, LR 36 (float32), Decoupled 40 (uint32). Each line names
// the Go expression of host.adamLoop it computes; Go's operand order is kept
// for the non-commutative operations (VSUBPS a, b, d is d = b - a).
TEXT ·adamAVX2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ gr+8(FP), SI
	MOVQ m+16(FP), DX
	MOVQ v+24(FP), CX
	MOVQ n+32(FP), BX
	MOVQ k+40(FP), R9
	VBROADCASTSS 0(R9), Y6   // gs
	VBROADCASTSS 4(R9), Y7   // wd
	VBROADCASTSS 8(R9), Y8   // b1
	VBROADCASTSS 12(R9), Y9  // 1-b1
	VBROADCASTSS 16(R9), Y10 // b2
	VBROADCASTSS 20(R9), Y11 // 1-b2
	VBROADCASTSS 24(R9), Y12 // c1
	VBROADCASTSS 28(R9), Y13 // c2
	VBROADCASTSS 32(R9), Y14 // eps
	VBROADCASTSS 36(R9), Y15 // lr
	MOVL 40(R9), R10         // decoupled
	XORQ AX, AX

loop:
	CMPQ AX, BX
	JGE  done
	VMOVUPS (SI)(AX*4), Y0 // gr[i]
	VMULPS  Y6, Y0, Y0     // g := gr[i] * gs
	VMOVUPS (DI)(AX*4), Y1 // p
	TESTL   R10, R10
	JNE     moments
	VMULPS  Y7, Y1, Y2     // wd * p
	VADDPS  Y2, Y0, Y0     // g += wd * p

moments:
	VMOVUPS (DX)(AX*4), Y2 // ms[i]
	VMULPS  Y8, Y2, Y2     // b1*ms[i]
	VMULPS  Y9, Y0, Y3     // omb1*g
	VADDPS  Y3, Y2, Y2     // mi := b1*ms[i] + omb1*g
	VMOVUPS Y2, (DX)(AX*4) // ms[i] = mi
	VMOVUPS (CX)(AX*4), Y3 // vs[i]
	VMULPS  Y10, Y3, Y3    // b2*vs[i]
	VMULPS  Y11, Y0, Y4    // omb2*g
	VMULPS  Y0, Y4, Y4     // omb2*g*g
	VADDPS  Y4, Y3, Y3     // vi := b2*vs[i] + omb2*g*g
	VMOVUPS Y3, (CX)(AX*4) // vs[i] = vi
	VSQRTPS Y3, Y3         // F(math.Sqrt(float64(vi)))
	VMULPS  Y13, Y3, Y3    // ... * c2
	VADDPS  Y14, Y3, Y3    // ... + eps
	VMULPS  Y12, Y2, Y2    // mi * c1
	VDIVPS  Y3, Y2, Y2     // upd := (mi * c1) / (...)
	TESTL   R10, R10
	JEQ     step
	VMULPS  Y7, Y1, Y4     // wd * p
	VADDPS  Y4, Y2, Y2     // upd += wd * p

step:
	VMULPS  Y15, Y2, Y2    // lr*upd
	VSUBPS  Y2, Y1, Y1     // p - lr*upd
	VMOVUPS Y1, (DI)(AX*4) // ps[i] = ...
	ADDQ    $8, AX
	JMP     loop

done:
	VZEROUPPER
	RET

// func expAVX2(a *float64, n int, k *ExpConsts) int
//
// ExpConsts: Low 0, High 8, Scale 16, Round 24, Ln2Hi 32, Ln2Lo 40, C5 48,
// C4 56, C3 64, C2 72, One 80, Table 88 (a pointer). Four lanes a step,
// each line the Go expression of host.expLoop it computes; it returns the
// index of the first step with a lane outside (Low, High), or n.
TEXT ·expAVX2(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), DI
	MOVQ n+8(FP), BX
	MOVQ k+16(FP), R9
	VBROADCASTSD 16(R9), Y6  // expScale
	VBROADCASTSD 24(R9), Y7  // expRound
	VBROADCASTSD 32(R9), Y8  // expLn2Hi
	VBROADCASTSD 40(R9), Y9  // expLn2Lo
	VBROADCASTSD 48(R9), Y10 // 1.0/120
	VBROADCASTSD 56(R9), Y11 // 1.0/24
	VBROADCASTSD 64(R9), Y12 // 1.0/6
	VBROADCASTSD 72(R9), Y13 // 0.5
	VBROADCASTSD 80(R9), Y14 // 1
	MOVQ 88(R9), R8          // &expTable
	MOVQ $255, R10
	MOVQ R10, X15
	VPBROADCASTQ X15, Y15    // 255
	XORQ AX, AX

exploop:
	CMPQ AX, BX
	JGE  expdone
	VMOVUPD (DI)(AX*8), Y0      // x
	VBROADCASTSD 0(R9), Y4      // -708
	VBROADCASTSD 8(R9), Y5      // 709
	VCMPPD    $0x1e, Y4, Y0, Y4 // x > -708 (ordered: false for NaN)
	VCMPPD    $0x11, Y5, Y0, Y5 // x < 709 (ordered)
	VANDPD    Y5, Y4, Y4
	VMOVMSKPD Y4, CX
	CMPL      CX, $15
	JNE       expdone           // a lane for math.Exp: the Go loop takes these four
	VMULPD  Y6, Y0, Y1          // x*expScale
	VADDPD  Y7, Y1, Y1          // t := x*expScale + expRound (kb: its bits)
	VSUBPD  Y7, Y1, Y2          // kf := t - expRound
	VMULPD  Y8, Y2, Y3          // kf*expLn2Hi
	VSUBPD  Y3, Y0, Y0          // x - kf*expLn2Hi
	VMULPD  Y9, Y2, Y3          // kf*expLn2Lo
	VSUBPD  Y3, Y0, Y0          // r := x - kf*expLn2Hi - kf*expLn2Lo
	VMULPD  Y10, Y0, Y2         // r*(1.0/120)
	VADDPD  Y11, Y2, Y2         // 1.0/24 + ...
	VMULPD  Y2, Y0, Y2          // r*(...)
	VADDPD  Y12, Y2, Y2         // 1.0/6 + ...
	VMULPD  Y2, Y0, Y2          // r*(...)
	VADDPD  Y13, Y2, Y2         // 0.5 + ...
	VMULPD  Y2, Y0, Y2          // r*(...)
	VADDPD  Y14, Y2, Y2         // 1 + ...
	VMULPD  Y2, Y0, Y2          // q := r * (...)
	VPAND   Y15, Y1, Y3         // kb&255
	VPCMPEQQ Y4, Y4, Y4         // the gather's mask: every lane
	VXORPD  Y5, Y5, Y5
	VGATHERQPD Y4, (R8)(Y3*8), Y5 // tj := expTable[kb&255]
	VMULPD  Y2, Y5, Y3          // tj*q
	VADDPD  Y3, Y5, Y3          // tj + tj*q
	VPSRLQ  $8, Y1, Y1          // kb>>8
	VPSLLQ  $52, Y1, Y1         // (kb>>8)<<52
	VPADDQ  Y1, Y3, Y3          // Float64bits(tj+tj*q) + (kb>>8)<<52
	VMOVUPD Y3, (DI)(AX*8)
	ADDQ    $4, AX
	JMP     exploop

expdone:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET
