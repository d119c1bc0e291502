mod common;

use tiga_ptx::validate;

#[test]
fn saxpy_prints_exactly() {
    let m = common::saxpy(80);
    validate(&m).expect("saxpy validates");
    let expected = "\
.version 8.0
.target sm_80
.address_size 64

.visible .entry saxpy(
    .param .u32 n,
    .param .f32 a,
    .param .u64 x,
    .param .u64 y
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<7>;
    .reg .b64 %rd<7>;
    .reg .f32 %f<4>;

    ld.param.u32 %r0, [n];
    ld.param.f32 %f0, [a];
    ld.param.u64 %rd0, [x];
    ld.param.u64 %rd1, [y];
    cvta.to.global.u64 %rd2, %rd0;
    cvta.to.global.u64 %rd3, %rd1;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.u32 %r4, %r1, %r2, %r3;
    mov.u32 %r5, %nctaid.x;
    mul.lo.u32 %r6, %r5, %r2;
    setp.ge.u32 %p0, %r4, %r0;
    @%p0 bra $L_1;
$L_0:
    mul.wide.u32 %rd4, %r4, 4;
    add.u64 %rd5, %rd2, %rd4;
    add.u64 %rd6, %rd3, %rd4;
    ld.global.nc.f32 %f1, [%rd5];
    ld.global.f32 %f2, [%rd6];
    fma.rn.f32 %f3, %f0, %f1, %f2;
    st.global.f32 [%rd6], %f3;
    add.u32 %r4, %r4, %r6;
    setp.lt.u32 %p1, %r4, %r0;
    @%p1 bra $L_0;
$L_1:
    ret;
}
";
    assert_eq!(m.print(), expected);
}

#[test]
fn reduce_and_assorted_validate() {
    validate(&common::reduce_sum(90)).expect("reduce_sum validates");
    validate(&common::assorted(90)).expect("assorted validates");
}
