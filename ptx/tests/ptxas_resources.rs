//! `ptxas -v` diagnostics parse into per-function resources.

use tiga_ptx::{parse_resources, Resources};

#[test]
fn parses_two_functions() {
    let text = "ptxas info    : 0 bytes gmem\n\
ptxas info    : Compiling entry function 'a' for 'sm_80'\n\
ptxas info    : Function properties for a\n\
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
ptxas info    : Used 40 registers, used 0 barriers, 380 bytes cmem[0]\n\
ptxas info    : Compile time = 1.0 ms\n\
ptxas info    : Compiling entry function 'b_vjp' for 'sm_80'\n\
ptxas info    : Function properties for b_vjp\n\
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
ptxas info    : Used 255 registers, used 0 barriers, 360 bytes cmem[0]\n";
    let r = parse_resources(text).expect("parses");
    assert_eq!(
        r,
        vec![
            Resources { function: "a".into(), registers: 40, stack_frame_bytes: 8, spill_store_bytes: 4, spill_load_bytes: 12 },
            Resources {
                function: "b_vjp".into(),
                registers: 255,
                stack_frame_bytes: 0,
                spill_store_bytes: 0,
                spill_load_bytes: 0
            },
        ]
    );
}

#[test]
fn a_line_before_any_function_is_an_error() {
    assert!(parse_resources("ptxas info    : Used 8 registers\n").is_err());
}
