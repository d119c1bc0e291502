//! NumPy arrays in and out of tiga's calls, without copies.
//!
//! A field is read in place: a C-contiguous `float32`, `float64` or
//! `float16` array is borrowed (read-only, so NumPy refuses a writer while
//! the kernel runs) and handed to the kernel as a `TensorView` of its
//! buffer. Other layouts are refused here; the Python layer makes them
//! contiguous once before calling (and says so in its docs). Outputs move
//! their buffer into a NumPy array (`PyArray::from_vec`): no copy either.

use numpy::{Element, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt};
use tiga::half::f16;
use tiga::{Buffer, DType, Data, Input, Tensor, TensorView};

use crate::errors;

/// One argument of a call, held for as long as the call runs.
pub enum Held<'py> {
    F32(PyReadonlyArrayDyn<'py, f32>),
    F64(PyReadonlyArrayDyn<'py, f64>),
    F16(PyReadonlyArrayDyn<'py, f16>),
    /// A Python number (a scalar parameter), in the call's dtype.
    Number(f64),
}

/// The element type an argument asks the call to compute in (`None`: a
/// number, which takes the arrays' dtype).
impl Held<'_> {
    pub fn dtype(&self) -> Option<DType> {
        match self {
            Held::F32(_) | Held::F16(_) => Some(DType::F32),
            Held::F64(_) => Some(DType::F64),
            Held::Number(_) => None,
        }
    }

    /// The kernel's view of it; `dtype` is the call's, for numbers.
    pub fn input(&self, dtype: DType) -> Result<Input<'_>, String> {
        fn view<'a, T: Element>(a: &'a PyReadonlyArrayDyn<'_, T>, wrap: fn(&'a [T]) -> Data<'a>) -> Result<Input<'a>, String> {
            let shape = a.shape().to_vec();
            let data = a.as_slice().map_err(|_| "is not C-contiguous (np.ascontiguousarray makes it so)".to_string())?;
            TensorView::new(shape, wrap(data)).map(Input::View).map_err(|e| e.to_string())
        }
        match self {
            Held::F32(a) => view(a, Data::F32),
            Held::F64(a) => view(a, Data::F64),
            Held::F16(a) => view(a, Data::F16),
            Held::Number(x) => Ok(Input::Owned(match dtype {
                DType::F32 => Tensor::scalar_f32(*x as f32),
                DType::F64 => Tensor::scalar_f64(*x),
            })),
        }
    }
}

/// How an argument that is not what a call reads is named in its error:
/// a NumPy array by its dtype, anything else by its type.
fn described(obj: &Bound<'_, PyAny>) -> String {
    match obj.cast::<PyUntypedArray>() {
        Ok(a) => format!("a NumPy array of {}", a.dtype().str().map(|s| s.to_string()).unwrap_or_else(|_| "?".into())),
        Err(_) => obj.get_type().name().map(|s| s.to_string()).unwrap_or_else(|_| "?".into()),
    }
}

/// Borrow `obj`, the value of field `what`: a NumPy array of a float type
/// or (`numbers`) a Python number.
pub fn hold<'py>(py: Python<'py>, what: &str, obj: &Bound<'py, PyAny>, numbers: bool) -> PyResult<Held<'py>> {
    if let Ok(a) = obj.cast::<PyArrayDyn<f32>>() {
        return Ok(Held::F32(a.readonly()));
    }
    if let Ok(a) = obj.cast::<PyArrayDyn<f64>>() {
        return Ok(Held::F64(a.readonly()));
    }
    if let Ok(a) = obj.cast::<PyArrayDyn<f16>>() {
        return Ok(Held::F16(a.readonly()));
    }
    if obj.cast::<PyUntypedArray>().is_ok() {
        return Err(errors::input(py, format!("{what}: {}; tiga reads float32, float64 and float16 arrays", described(obj))));
    }
    if numbers && !obj.is_instance_of::<PyBool>() && (obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyInt>()) {
        return Ok(Held::Number(obj.extract::<f64>()?));
    }
    let wanted = if numbers { "a NumPy array or a number" } else { "a NumPy array" };
    Err(errors::input(py, format!("{what}: expected {wanted}, got {}", described(obj))))
}

/// Read an integer array argument (`edge_index`, CSR offsets) as i64,
/// refusing other dtypes by name.
pub fn index_array<'py>(py: Python<'py>, what: &str, obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArrayDyn<'py, i64>> {
    match obj.cast::<PyArrayDyn<i64>>() {
        Ok(a) => Ok(a.readonly()),
        Err(_) => Err(errors::input(py, format!("{what}: expected an int64 NumPy array, got {}", described(obj)))),
    }
}

/// A tensor as a NumPy array of its shape, its buffer moved, not copied.
/// bf16 (which NumPy lacks) is widened to float32, exactly.
pub fn to_numpy<'py>(py: Python<'py>, t: Tensor) -> PyResult<Bound<'py, PyAny>> {
    if t.is_mapped() && t.field_type() != tiga::FieldType::BF16 {
        return borrow_mapping(py, t);
    }
    let (shape, buffer) = t.into_parts();
    // A scalar (a parameter gradient of shape []) is a 0-d array.
    let flat = match buffer {
        Buffer::F32(v) => numpy::PyArray1::from_vec(py, v).into_any(),
        Buffer::F64(v) => numpy::PyArray1::from_vec(py, v).into_any(),
        Buffer::F16(v) => numpy::PyArray1::from_vec(py, v).into_any(),
        Buffer::BF16(v) => numpy::PyArray1::from_vec(py, v.iter().map(|x| x.to_f32()).collect::<Vec<f32>>()).into_any(),
    };
    flat.call_method1("reshape", (shape,))
}

/// The tensor a NumPy array borrows its elements from (its `base`): a
/// large output lives in a mapping of its own, which goes back to tiga's
/// spare when the array is freed, so the next call's output reuses it
/// instead of faulting in fresh pages (copying it into a `Vec` cost the
/// power-law sum's Python call a third over the same call from Rust).
#[pyclass(name = "TensorMemory", module = "tiga._tiga", frozen)]
pub struct TensorMemory {
    tensor: Tensor,
}

/// A NumPy array over the mapping of `t` (f32, f64 or f16), which the
/// array keeps alive.
fn borrow_mapping<'py>(py: Python<'py>, t: Tensor) -> PyResult<Bound<'py, PyAny>> {
    fn borrowed<'py, T: Element>(
        owner: &Bound<'py, TensorMemory>,
        ptr: *const u8,
        shape: &[usize],
    ) -> PyResult<Bound<'py, PyAny>> {
        let shape = numpy::ndarray::IxDyn(shape);
        // SAFETY: `ptr` is the start of the tensor's mapping of
        // `shape.product()` elements of `T`, aligned for `T` (a page); the
        // mapping does not move and lives as long as `owner`, which the
        // array holds as its base.
        let view = unsafe { numpy::ndarray::ArrayViewD::<T>::from_shape_ptr(shape, ptr as *const T) };
        // SAFETY: as above: `owner` keeps the elements alive and in place.
        Ok(unsafe { numpy::PyArrayDyn::borrow_from_array(&view, owner.clone().into_any()) }.into_any())
    }
    let owner = Bound::new(py, TensorMemory { tensor: t })?;
    let (ptr, shape, ty) = {
        let t = &owner.get().tensor;
        (t.data().as_ptr(), t.shape().to_vec(), t.field_type())
    };
    match ty {
        tiga::FieldType::F32 => borrowed::<f32>(&owner, ptr, &shape),
        tiga::FieldType::F64 => borrowed::<f64>(&owner, ptr, &shape),
        // bf16 never comes here: `to_numpy` widens it.
        _ => borrowed::<f16>(&owner, ptr, &shape),
    }
}

/// Outputs by name as a dict of NumPy arrays.
pub fn dict_of<'py>(py: Python<'py>, items: Vec<(String, Tensor)>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, t) in items {
        d.set_item(name, to_numpy(py, t)?)?;
    }
    Ok(d)
}
