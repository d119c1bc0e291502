//! The types and functions a kernel module is written against.
//!
//! A tiga kernel is an ordinary Rust module marked `#[message_passing(..)]`
//! (see `docs/kernel-language.md`). The proc-macro reads the module's text to
//! compile it, but it also *keeps* the user's functions as plain Rust, so:
//!
//! * rustc type-checks every `edge`, `node`, `identity`, `combine` and
//!   `finalize` body against the names defined here (`Vector`, `Matrix`,
//!   `exp`, `max`, `matvec`, ...), and a kernel that tiga accepts is also a
//!   well-typed Rust program;
//! * tests can call those same functions directly, one edge and one node at a
//!   time, as the naive oracle the compiled kernel is checked against.
//!
//! This is therefore *not* a fast tensor library. Every operation allocates a
//! fresh [`Vector`], nothing is vectorised, and width mismatches panic with a
//! message naming both widths (the compiled path checks widths up front and
//! reports them as errors instead). What matters here is that the meaning of
//! each operation is obvious and matches the language reference:
//!
//! * `+ - * /` and unary `-` work elementwise on vectors, with a scalar on
//!   either side broadcast across the vector;
//! * `min`, `max`, `abs`, `exp`, `ln`, `sqrt`, `tanh`, `sigmoid`, `relu`,
//!   `leaky_relu`, `powi` work on scalars and elementwise on vectors, both as
//!   free functions and as methods (scalar methods beyond std's come from
//!   [`RealExt`]);
//! * [`sum`] reduces over the feature axis, [`dot`] is the inner product and
//!   [`matvec`] multiplies a row-major [`Matrix`] by a vector;
//! * [`gt`], [`ge`], [`lt`], [`le`] compare vectors feature by feature into a
//!   [`Mask`] (`!`, `&`, `|` combine masks), and [`select`] picks each
//!   feature from one of two vectors or scalars by a mask: the per-feature
//!   `if` (Rust's `if` takes one `bool`, so it chooses between scalars);
//!   `elu` is built on it.
//!
//! ```
//! use tiga_lang::*;
//!
//! pub struct Src { pub h: Vector<f32>, pub cs: f32 }
//! pub struct Edge { pub w: f32 }
//! pub fn edge(src: &Src, edge: &Edge) -> Vector<f32> {
//!     edge.w * src.cs * &src.h
//! }
//!
//! // The same function, called directly as the oracle for one edge:
//! let src = Src { h: Vector::new(vec![1.0, -2.0]), cs: 0.5 };
//! assert_eq!(edge(&src, &Edge { w: 4.0 }), Vector::new(vec![2.0, -4.0]));
//! assert_eq!(sigmoid(0.0_f32), 0.5);
//! assert_eq!(relu(&src.h).sum(), 1.0);
//! ```
//!
//! Everything exists for `f32` and `f64` alike; the two precisions never mix
//! implicitly (as in std), which keeps float literals inferring to the
//! precision of the other operand.

use std::fmt;
use std::ops::{Add, AddAssign, BitAnd, BitOr, Div, DivAssign, Index, IndexMut, Mul, MulAssign, Neg, Not, Sub, SubAssign};

// ---------------------------------------------------------------------------
// Scalars
// ---------------------------------------------------------------------------

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// The two scalar types of the language, `f32` and `f64`.
///
/// Sealed: it exists so that [`Vector`], [`Matrix`] and the free functions can
/// be written once for both precisions.
pub trait Float:
    sealed::Sealed
    + Copy
    + PartialOrd
    + PartialEq
    + fmt::Debug
    + fmt::Display
    + Default
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + 'static
{
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// The name of the type, for messages (`"f32"` or `"f64"`).
    const NAME: &'static str;

    /// Smaller of the two (IEEE `minNum`: a NaN operand loses).
    fn fmin(self, other: Self) -> Self;
    /// Larger of the two (IEEE `maxNum`: a NaN operand loses).
    fn fmax(self, other: Self) -> Self;
    /// Absolute value.
    fn fabs(self) -> Self;
    /// e^x.
    fn fexp(self) -> Self;
    /// Natural logarithm.
    fn fln(self) -> Self;
    /// Square root.
    fn fsqrt(self) -> Self;
    /// Hyperbolic tangent.
    fn ftanh(self) -> Self;
    /// x^n for an integer n.
    fn fpowi(self, n: i32) -> Self;

    /// 1 / (1 + e^-x).
    #[inline]
    fn fsigmoid(self) -> Self {
        Self::ONE / (Self::ONE + (-self).fexp())
    }
    /// max(x, 0).
    #[inline]
    fn frelu(self) -> Self {
        self.fmax(Self::ZERO)
    }
    /// x if x > 0, otherwise slope · x.
    #[inline]
    fn fleaky_relu(self, slope: Self) -> Self {
        if self > Self::ZERO {
            self
        } else {
            slope * self
        }
    }
    /// x if x > 0, otherwise alpha · (e^x − 1).
    #[inline]
    fn felu(self, alpha: Self) -> Self {
        if self > Self::ZERO {
            self
        } else {
            alpha * (self.fexp() - Self::ONE)
        }
    }
}

macro_rules! impl_float {
    ($T:ident) => {
        impl Float for $T {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NAME: &'static str = stringify!($T);
            #[inline]
            fn fmin(self, other: Self) -> Self {
                $T::min(self, other)
            }
            #[inline]
            fn fmax(self, other: Self) -> Self {
                $T::max(self, other)
            }
            #[inline]
            fn fabs(self) -> Self {
                $T::abs(self)
            }
            #[inline]
            fn fexp(self) -> Self {
                $T::exp(self)
            }
            #[inline]
            fn fln(self) -> Self {
                $T::ln(self)
            }
            #[inline]
            fn fsqrt(self) -> Self {
                $T::sqrt(self)
            }
            #[inline]
            fn ftanh(self) -> Self {
                $T::tanh(self)
            }
            #[inline]
            fn fpowi(self, n: i32) -> Self {
                $T::powi(self, n)
            }
        }

        impl RealExt for $T {
            #[inline]
            fn sigmoid(self) -> Self {
                self.fsigmoid()
            }
            #[inline]
            fn relu(self) -> Self {
                self.frelu()
            }
            #[inline]
            fn leaky_relu(self, slope: Self) -> Self {
                self.fleaky_relu(slope)
            }
            #[inline]
            fn elu(self, alpha: Self) -> Self {
                self.felu(alpha)
            }
        }
    };
}

/// Methods the language has on scalars that std's `f32`/`f64` lack.
///
/// (`exp`, `ln`, `sqrt`, `tanh`, `abs`, `min`, `max` and `powi` are already
/// inherent methods of `f32` and `f64`.) Brought into scope by
/// `use tiga::lang::*;`, so `x.relu()` works on a scalar field.
pub trait RealExt: Sized {
    /// 1 / (1 + e^-x).
    fn sigmoid(self) -> Self;
    /// max(x, 0).
    fn relu(self) -> Self;
    /// x if x > 0, otherwise slope · x.
    fn leaky_relu(self, slope: Self) -> Self;
    /// x if x > 0, otherwise alpha · (e^x − 1).
    fn elu(self, alpha: Self) -> Self;
}

impl_float!(f32);
impl_float!(f64);

// ---------------------------------------------------------------------------
// Vector
// ---------------------------------------------------------------------------

/// One row of features (width F, fixed at call time): `Vector<f32>` or
/// `Vector<f64>`.
///
/// Arithmetic is elementwise, with scalars broadcast; operands may be owned
/// or borrowed (`edge.w * &src.h`, `dst.cd * agg`, `&a + &b`). Mismatched
/// widths panic, naming both.
/// A field declared `bf16` (`pub h: Vector<bf16>`) is stored at half width
/// and computed with in f32: in a kernel's functions its values are f32,
/// so for rustc `bf16` is `f32` here, and the oracle functions compute as
/// the compiled kernel does. The stored type is the tensor's
/// (`tiga::half::bf16`); the front end reads this name from the source.
#[allow(non_camel_case_types)]
pub type bf16 = f32;

/// A field declared `f16`: stored as IEEE binary16, computed in f32 (see
/// [`bf16`]).
#[allow(non_camel_case_types)]
pub type f16 = f32;

#[derive(Clone, Debug, PartialEq, Default)]
pub struct Vector<T>(pub Vec<T>);

impl<T> Vector<T> {
    /// Wraps a row of values.
    #[inline]
    pub fn new(data: Vec<T>) -> Self {
        Vector(data)
    }

    /// The width F.
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the width is 0.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The values, in feature order.
    #[inline]
    pub fn as_slice(&self) -> &[T] {
        &self.0
    }

    /// The values, mutably.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.0
    }

    /// Iterates over the values.
    #[inline]
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }

    /// Unwraps into the underlying `Vec`.
    #[inline]
    pub fn into_vec(self) -> Vec<T> {
        self.0
    }
}

impl<T: Float> Vector<T> {
    /// A vector of `width` zeros.
    pub fn zeros(width: usize) -> Self {
        Vector(vec![T::ZERO; width])
    }

    /// A vector of `width` copies of `value`.
    pub fn filled(width: usize, value: T) -> Self {
        Vector(vec![value; width])
    }

    /// Applies `f` to every element.
    pub fn map(&self, f: impl Fn(T) -> T) -> Vector<T> {
        Vector(self.0.iter().map(|&x| f(x)).collect())
    }

    /// Elementwise e^x.
    pub fn exp(&self) -> Vector<T> {
        self.map(T::fexp)
    }
    /// Elementwise natural logarithm.
    pub fn ln(&self) -> Vector<T> {
        self.map(T::fln)
    }
    /// Elementwise square root.
    pub fn sqrt(&self) -> Vector<T> {
        self.map(T::fsqrt)
    }
    /// Elementwise hyperbolic tangent.
    pub fn tanh(&self) -> Vector<T> {
        self.map(T::ftanh)
    }
    /// Elementwise absolute value.
    pub fn abs(&self) -> Vector<T> {
        self.map(T::fabs)
    }
    /// Elementwise 1 / (1 + e^-x).
    pub fn sigmoid(&self) -> Vector<T> {
        self.map(T::fsigmoid)
    }
    /// Elementwise max(x, 0).
    pub fn relu(&self) -> Vector<T> {
        self.map(T::frelu)
    }
    /// Elementwise x if x > 0, otherwise slope · x.
    pub fn leaky_relu(&self, slope: T) -> Vector<T> {
        self.map(|x| x.fleaky_relu(slope))
    }
    /// Elementwise x if x > 0, otherwise alpha · (e^x − 1).
    pub fn elu(&self, alpha: T) -> Vector<T> {
        self.map(|x| x.felu(alpha))
    }
    /// Elementwise x^n.
    pub fn powi(&self, n: i32) -> Vector<T> {
        self.map(|x| x.fpowi(n))
    }
    /// Sum over the feature axis.
    pub fn sum(&self) -> T {
        self.0.iter().fold(T::ZERO, |acc, &x| acc + x)
    }
    /// Inner product with another vector of the same width.
    pub fn dot<R: VecArg<Elem = T>>(&self, other: R) -> T {
        dot_slices(&self.0, other.values())
    }
    /// Elementwise maximum with a vector (owned or borrowed) or a scalar.
    pub fn max<R>(&self, other: R) -> Vector<T>
    where
        Vector<T>: ElemMax<R, Output = Vector<T>>,
    {
        self.clone().max_of(other)
    }
    /// Elementwise minimum with a vector (owned or borrowed) or a scalar.
    pub fn min<R>(&self, other: R) -> Vector<T>
    where
        Vector<T>: ElemMin<R, Output = Vector<T>>,
    {
        self.clone().min_of(other)
    }
}

impl<T> From<Vec<T>> for Vector<T> {
    #[inline]
    fn from(data: Vec<T>) -> Self {
        Vector(data)
    }
}

impl<T> From<Vector<T>> for Vec<T> {
    #[inline]
    fn from(v: Vector<T>) -> Self {
        v.0
    }
}

impl<T> AsRef<[T]> for Vector<T> {
    #[inline]
    fn as_ref(&self) -> &[T] {
        &self.0
    }
}

impl<T> Index<usize> for Vector<T> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        &self.0[i]
    }
}

impl<T> IndexMut<usize> for Vector<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.0[i]
    }
}

impl<T> IntoIterator for Vector<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a, T> IntoIterator for &'a Vector<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<T> FromIterator<T> for Vector<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Vector(iter.into_iter().collect())
    }
}

/// Elementwise `f(a[i], b[i])`; panics when the widths differ.
fn zip_vv<T: Float>(op: &str, a: &[T], b: &[T], f: impl Fn(T, T) -> T) -> Vector<T> {
    assert!(
        a.len() == b.len(),
        "tiga::lang: `{op}` on Vector<{}> of different widths: left has width {}, right has width {}",
        T::NAME,
        a.len(),
        b.len()
    );
    Vector(a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect())
}

/// `f(a[i], s)` for every i.
fn zip_vs<T: Float>(a: &[T], s: T, f: impl Fn(T, T) -> T) -> Vector<T> {
    Vector(a.iter().map(|&x| f(x, s)).collect())
}

/// `f(s, b[i])` for every i.
fn zip_sv<T: Float>(s: T, b: &[T], f: impl Fn(T, T) -> T) -> Vector<T> {
    Vector(b.iter().map(|&y| f(s, y)).collect())
}

fn dot_slices<T: Float>(a: &[T], b: &[T]) -> T {
    assert!(
        a.len() == b.len(),
        "tiga::lang: `dot` of Vector<{}> of different widths: left has width {}, right has width {}",
        T::NAME,
        a.len(),
        b.len()
    );
    a.iter().zip(b).fold(T::ZERO, |acc, (&x, &y)| acc + x * y)
}

/// Implements `$Tr<Rhs> for Lhs` (method `$m`) for every vector/vector and
/// vector/scalar combination of owned and borrowed operands.
macro_rules! broadcast_binop {
    ($T:ident, $Tr:ident, $m:ident, $name:literal, $f:expr) => {
        impl $Tr<Vector<$T>> for Vector<$T> {
            type Output = Vector<$T>;
            #[inline]
            fn $m(self, rhs: Vector<$T>) -> Vector<$T> {
                zip_vv($name, &self.0, &rhs.0, $f)
            }
        }
        impl $Tr<&Vector<$T>> for Vector<$T> {
            type Output = Vector<$T>;
            #[inline]
            fn $m(self, rhs: &Vector<$T>) -> Vector<$T> {
                zip_vv($name, &self.0, &rhs.0, $f)
            }
        }
        impl $Tr<Vector<$T>> for &Vector<$T> {
            type Output = Vector<$T>;
            #[inline]
            fn $m(self, rhs: Vector<$T>) -> Vector<$T> {
                zip_vv($name, &self.0, &rhs.0, $f)
            }
        }
        impl $Tr<&Vector<$T>> for &Vector<$T> {
            type Output = Vector<$T>;
            #[inline]
            fn $m(self, rhs: &Vector<$T>) -> Vector<$T> {
                zip_vv($name, &self.0, &rhs.0, $f)
            }
        }
        impl $Tr<$T> for Vector<$T> {
            type Output = Vector<$T>;
            #[inline]
            fn $m(self, rhs: $T) -> Vector<$T> {
                zip_vs(&self.0, rhs, $f)
            }
        }
        impl $Tr<$T> for &Vector<$T> {
            type Output = Vector<$T>;
            #[inline]
            fn $m(self, rhs: $T) -> Vector<$T> {
                zip_vs(&self.0, rhs, $f)
            }
        }
        impl $Tr<Vector<$T>> for $T {
            type Output = Vector<$T>;
            #[inline]
            fn $m(self, rhs: Vector<$T>) -> Vector<$T> {
                zip_sv(self, &rhs.0, $f)
            }
        }
        impl $Tr<&Vector<$T>> for $T {
            type Output = Vector<$T>;
            #[inline]
            fn $m(self, rhs: &Vector<$T>) -> Vector<$T> {
                zip_sv(self, &rhs.0, $f)
            }
        }
    };
}

/// `v op= w` / `v op= &w` / `v op= s`, in terms of the binary operator.
macro_rules! assign_op {
    ($T:ident, $Tr:ident, $m:ident, $op:tt) => {
        impl $Tr<Vector<$T>> for Vector<$T> {
            #[inline]
            fn $m(&mut self, rhs: Vector<$T>) {
                *self = &*self $op rhs;
            }
        }
        impl $Tr<&Vector<$T>> for Vector<$T> {
            #[inline]
            fn $m(&mut self, rhs: &Vector<$T>) {
                *self = &*self $op rhs;
            }
        }
        impl $Tr<$T> for Vector<$T> {
            #[inline]
            fn $m(&mut self, rhs: $T) {
                *self = &*self $op rhs;
            }
        }
    };
}

macro_rules! impl_vector_ops {
    ($T:ident) => {
        broadcast_binop!($T, Add, add, "+", |a: $T, b: $T| a + b);
        broadcast_binop!($T, Sub, sub, "-", |a: $T, b: $T| a - b);
        broadcast_binop!($T, Mul, mul, "*", |a: $T, b: $T| a * b);
        broadcast_binop!($T, Div, div, "/", |a: $T, b: $T| a / b);
        broadcast_binop!($T, ElemMax, max_of, "max", |a: $T, b: $T| a.fmax(b));
        broadcast_binop!($T, ElemMin, min_of, "min", |a: $T, b: $T| a.fmin(b));

        assign_op!($T, AddAssign, add_assign, +);
        assign_op!($T, SubAssign, sub_assign, -);
        assign_op!($T, MulAssign, mul_assign, *);
        assign_op!($T, DivAssign, div_assign, /);

        impl Neg for Vector<$T> {
            type Output = Vector<$T>;
            #[inline]
            fn neg(self) -> Vector<$T> {
                self.map(|x| -x)
            }
        }
        impl Neg for &Vector<$T> {
            type Output = Vector<$T>;
            #[inline]
            fn neg(self) -> Vector<$T> {
                self.map(|x| -x)
            }
        }

        // min/max of two scalars.
        impl ElemMax<$T> for $T {
            type Output = $T;
            #[inline]
            fn max_of(self, rhs: $T) -> $T {
                self.fmax(rhs)
            }
        }
        impl ElemMin<$T> for $T {
            type Output = $T;
            #[inline]
            fn min_of(self, rhs: $T) -> $T {
                self.fmin(rhs)
            }
        }

        impl Real for $T {
            type Scalar = $T;
            type Output = $T;
            #[inline]
            fn map_elems(self, f: impl Fn($T) -> $T) -> $T {
                f(self)
            }
        }
        impl Real for Vector<$T> {
            type Scalar = $T;
            type Output = Vector<$T>;
            #[inline]
            fn map_elems(self, f: impl Fn($T) -> $T) -> Vector<$T> {
                let mut v = self;
                for x in v.0.iter_mut() {
                    *x = f(*x);
                }
                v
            }
        }
        impl Real for &Vector<$T> {
            type Scalar = $T;
            type Output = Vector<$T>;
            #[inline]
            fn map_elems(self, f: impl Fn($T) -> $T) -> Vector<$T> {
                self.map(f)
            }
        }
    };
}

/// Elementwise maximum with broadcasting: the operand pairs [`max`] accepts
/// (two scalars of one precision, two vectors owned or borrowed, or a vector
/// and a scalar in either order).
pub trait ElemMax<Rhs = Self> {
    /// `f32`/`f64` for two scalars, otherwise a [`Vector`].
    type Output;
    /// The larger of `self` and `rhs`, elementwise.
    fn max_of(self, rhs: Rhs) -> Self::Output;
}

/// Elementwise minimum with broadcasting: the operand pairs [`min`] accepts
/// (as for [`ElemMax`]).
pub trait ElemMin<Rhs = Self> {
    /// `f32`/`f64` for two scalars, otherwise a [`Vector`].
    type Output;
    /// The smaller of `self` and `rhs`, elementwise.
    fn min_of(self, rhs: Rhs) -> Self::Output;
}

impl_vector_ops!(f32);
impl_vector_ops!(f64);

// ---------------------------------------------------------------------------
// Matrix
// ---------------------------------------------------------------------------

/// A small row-major matrix parameter (`[rows, cols]`), for [`matvec`].
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Matrix<T> {
    /// Number of rows R (the width of `matvec`'s result).
    pub rows: usize,
    /// Number of columns C (the width `matvec` expects of its vector).
    pub cols: usize,
    /// `rows * cols` values, row after row.
    pub data: Vec<T>,
}

impl<T> Matrix<T> {
    /// A `rows x cols` matrix from row-major `data`.
    ///
    /// Panics unless `data.len() == rows * cols`.
    pub fn new(rows: usize, cols: usize, data: Vec<T>) -> Self {
        assert!(
            rows.checked_mul(cols) == Some(data.len()),
            "tiga::lang: Matrix::new({rows}, {cols}, ..) needs {rows}x{cols} values, got {}",
            data.len()
        );
        Matrix { rows, cols, data }
    }

    /// A matrix from its rows; all rows must have the same length.
    pub fn from_rows(rows: Vec<Vec<T>>) -> Self {
        let r = rows.len();
        let c = rows.first().map_or(0, Vec::len);
        let mut data = Vec::with_capacity(r * c);
        for (i, row) in rows.into_iter().enumerate() {
            assert!(row.len() == c, "tiga::lang: Matrix::from_rows: row {i} has {} values, row 0 has {c}", row.len());
            data.extend(row);
        }
        Matrix { rows: r, cols: c, data }
    }

    /// Row `r` as a slice of `cols` values.
    pub fn row(&self, r: usize) -> &[T] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }
}

impl<T> Index<(usize, usize)> for Matrix<T> {
    type Output = T;
    fn index(&self, (r, c): (usize, usize)) -> &T {
        assert!(r < self.rows && c < self.cols, "tiga::lang: index ({r}, {c}) out of a {}x{} matrix", self.rows, self.cols);
        &self.data[r * self.cols + c]
    }
}

// ---------------------------------------------------------------------------
// Generic free functions
// ---------------------------------------------------------------------------

/// A value the elementwise functions accept: `f32`, `f64`, `Vector<f32>`,
/// `Vector<f64>`, or a borrowed vector.
pub trait Real: Sized {
    /// The element type, `f32` or `f64`.
    type Scalar: Float;
    /// What an elementwise function returns: the scalar for a scalar, an owned
    /// [`Vector`] for a vector (owned or borrowed).
    type Output;
    /// Applies `f` to every element (the value itself, for a scalar).
    fn map_elems(self, f: impl Fn(Self::Scalar) -> Self::Scalar) -> Self::Output;
}

/// A vector argument, owned or borrowed: what [`sum`], [`dot`] and [`matvec`]
/// accept.
pub trait VecArg {
    /// The element type, `f32` or `f64`.
    type Elem: Float;
    /// The values, in feature order.
    fn values(&self) -> &[Self::Elem];
}

impl<T: Float> VecArg for Vector<T> {
    type Elem = T;
    #[inline]
    fn values(&self) -> &[T] {
        &self.0
    }
}

impl<T: Float> VecArg for &Vector<T> {
    type Elem = T;
    #[inline]
    fn values(&self) -> &[T] {
        &self.0
    }
}

/// Elementwise maximum: `max(a, b)` of two scalars, two vectors, or a vector
/// and a scalar (broadcast) in either order.
#[inline]
pub fn max<A, B>(a: A, b: B) -> <A as ElemMax<B>>::Output
where
    A: ElemMax<B>,
{
    a.max_of(b)
}

/// Elementwise minimum: `min(a, b)` of two scalars, two vectors, or a vector
/// and a scalar (broadcast) in either order.
#[inline]
pub fn min<A, B>(a: A, b: B) -> <A as ElemMin<B>>::Output
where
    A: ElemMin<B>,
{
    a.min_of(b)
}

/// Elementwise absolute value.
#[inline]
pub fn abs<X: Real>(x: X) -> X::Output {
    x.map_elems(Float::fabs)
}

/// Elementwise e^x.
#[inline]
pub fn exp<X: Real>(x: X) -> X::Output {
    x.map_elems(Float::fexp)
}

/// Elementwise natural logarithm.
#[inline]
pub fn ln<X: Real>(x: X) -> X::Output {
    x.map_elems(Float::fln)
}

/// Elementwise square root.
#[inline]
pub fn sqrt<X: Real>(x: X) -> X::Output {
    x.map_elems(Float::fsqrt)
}

/// Elementwise hyperbolic tangent.
#[inline]
pub fn tanh<X: Real>(x: X) -> X::Output {
    x.map_elems(Float::ftanh)
}

/// Elementwise 1 / (1 + e^-x).
#[inline]
pub fn sigmoid<X: Real>(x: X) -> X::Output {
    x.map_elems(Float::fsigmoid)
}

/// Elementwise max(x, 0).
#[inline]
pub fn relu<X: Real>(x: X) -> X::Output {
    x.map_elems(Float::frelu)
}

/// Elementwise `x if x > 0 else slope * x`; `slope` is a scalar of `x`'s
/// precision (so `leaky_relu(s, 0.2)` infers `0.2: f32` for `s: f32`).
#[inline]
pub fn leaky_relu<X: Real>(x: X, slope: X::Scalar) -> X::Output {
    x.map_elems(move |v| v.fleaky_relu(slope))
}

/// Elementwise `x if x > 0 else alpha * (e^x - 1)`; `alpha` is a scalar of
/// `x`'s precision.
#[inline]
pub fn elu<X: Real>(x: X, alpha: X::Scalar) -> X::Output {
    x.map_elems(move |v| v.felu(alpha))
}

/// Elementwise x^n for an integer n.
#[inline]
pub fn powi<X: Real>(x: X, n: i32) -> X::Output {
    x.map_elems(move |v| v.fpowi(n))
}

/// Sum over the feature axis of a vector (owned or borrowed).
#[inline]
pub fn sum<V: VecArg>(v: V) -> V::Elem {
    v.values().iter().fold(V::Elem::ZERO, |acc, &x| acc + x)
}

/// Inner product of two vectors of equal width (each owned or borrowed).
#[inline]
pub fn dot<A, B>(a: A, b: B) -> A::Elem
where
    A: VecArg,
    B: VecArg<Elem = A::Elem>,
{
    dot_slices(a.values(), b.values())
}

/// `W · v`: a vector of width `w.rows`; `v`'s width must equal `w.cols`.
pub fn matvec<T: Float, V: VecArg<Elem = T>>(w: &Matrix<T>, v: V) -> Vector<T> {
    let x = v.values();
    assert!(
        x.len() == w.cols,
        "tiga::lang: `matvec` of a {}x{} Matrix<{}> with a vector of width {} (needs width {})",
        w.rows,
        w.cols,
        T::NAME,
        x.len(),
        w.cols
    );
    Vector((0..w.rows).map(|r| dot_slices(w.row(r), x)).collect())
}

// ---------------------------------------------------------------------------
// Masks and per-feature choice
// ---------------------------------------------------------------------------

/// One boolean per feature: what [`gt`], [`ge`], [`lt`] and [`le`] give for
/// vectors and [`select`] chooses by. `!m`, `m & n` and `m | n` work feature
/// by feature (owned or borrowed).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Mask(pub Vec<bool>);

impl Mask {
    /// Number of features.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether the mask has no features.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// The booleans, in feature order.
    pub fn as_slice(&self) -> &[bool] {
        &self.0
    }
}

/// A mask argument, owned or borrowed: what [`select`] accepts.
pub trait MaskArg {
    /// The booleans, in feature order.
    fn bits(&self) -> &[bool];
}

impl MaskArg for Mask {
    fn bits(&self) -> &[bool] {
        &self.0
    }
}

impl<M: MaskArg> MaskArg for &M {
    fn bits(&self) -> &[bool] {
        (**self).bits()
    }
}

impl Not for Mask {
    type Output = Mask;
    fn not(self) -> Mask {
        !&self
    }
}

impl Not for &Mask {
    type Output = Mask;
    fn not(self) -> Mask {
        Mask(self.0.iter().map(|b| !b).collect())
    }
}

fn zip_masks(op: &str, a: &[bool], b: &[bool], f: impl Fn(bool, bool) -> bool) -> Mask {
    assert!(a.len() == b.len(), "tiga::lang: `{op}` of masks: left has width {}, right has width {}", a.len(), b.len());
    Mask(a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect())
}

macro_rules! impl_mask_op {
    ($Tr:ident, $m:ident, $sym:literal, $f:expr) => {
        impl<R: MaskArg> $Tr<R> for Mask {
            type Output = Mask;
            fn $m(self, rhs: R) -> Mask {
                zip_masks($sym, &self.0, rhs.bits(), $f)
            }
        }
        impl<R: MaskArg> $Tr<R> for &Mask {
            type Output = Mask;
            fn $m(self, rhs: R) -> Mask {
                zip_masks($sym, &self.0, rhs.bits(), $f)
            }
        }
    };
}

impl_mask_op!(BitAnd, bitand, "&", |x, y| x && y);
impl_mask_op!(BitOr, bitor, "|", |x, y| x || y);

/// An operand of the per-feature comparisons and of [`select`]'s arms: a
/// scalar (the same value for every feature) or a vector, owned or borrowed.
pub trait Lanes {
    /// The element type, `f32` or `f64`.
    type Elem: Float;
    /// The width of a vector; `None` for a scalar.
    fn width(&self) -> Option<usize>;
    /// Feature `i` (the scalar itself, for a scalar).
    fn lane(&self, i: usize) -> Self::Elem;
}

/// Two operands of one precision (so a literal on either side takes the
/// other's precision, as in `gt(&src.h, 0.0)`).
pub trait LanePair<Rhs>: Lanes {}

macro_rules! impl_lanes {
    ($T:ident) => {
        impl Lanes for $T {
            type Elem = $T;
            #[inline]
            fn width(&self) -> Option<usize> {
                None
            }
            #[inline]
            fn lane(&self, _: usize) -> $T {
                *self
            }
        }
        impl Lanes for Vector<$T> {
            type Elem = $T;
            #[inline]
            fn width(&self) -> Option<usize> {
                Some(self.0.len())
            }
            #[inline]
            fn lane(&self, i: usize) -> $T {
                self.0[i]
            }
        }
        impl LanePair<$T> for $T {}
        impl LanePair<Vector<$T>> for $T {}
        impl LanePair<&Vector<$T>> for $T {}
        impl LanePair<$T> for Vector<$T> {}
        impl LanePair<Vector<$T>> for Vector<$T> {}
        impl LanePair<&Vector<$T>> for Vector<$T> {}
        impl LanePair<$T> for &Vector<$T> {}
        impl LanePair<Vector<$T>> for &Vector<$T> {}
        impl LanePair<&Vector<$T>> for &Vector<$T> {}
    };
}

impl_lanes!(f32);
impl_lanes!(f64);

/// A borrowed operand reads as the operand.
impl<L: Lanes> Lanes for &L {
    type Elem = L::Elem;
    #[inline]
    fn width(&self) -> Option<usize> {
        (**self).width()
    }
    #[inline]
    fn lane(&self, i: usize) -> L::Elem {
        (**self).lane(i)
    }
}

/// The width two operands share (a scalar takes the other's); panics on two
/// vectors of different widths, and on two scalars when `scalars` names the
/// operator to use for them instead.
fn lane_width(op: &str, a: Option<usize>, b: Option<usize>, scalars: &str) -> usize {
    match (a, b) {
        (Some(x), Some(y)) => {
            assert!(x == y, "tiga::lang: `{op}`: left has width {x}, right has width {y}");
            x
        }
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => panic!("tiga::lang: `{op}` of two scalars: {scalars}"),
    }
}

fn compare<A: LanePair<B>, B: Lanes<Elem = A::Elem>>(op: &str, a: &A, b: &B, f: impl Fn(A::Elem, A::Elem) -> bool) -> Mask {
    let w = lane_width(op, a.width(), b.width(), "compare scalars with `<`, `<=`, `>`, `>=`");
    Mask((0..w).map(|i| f(a.lane(i), b.lane(i))).collect())
}

/// Per feature `a > b`, for two vectors or a vector and a scalar.
pub fn gt<A: LanePair<B>, B: Lanes<Elem = A::Elem>>(a: A, b: B) -> Mask {
    compare("gt", &a, &b, |x, y| x > y)
}

/// Per feature `a >= b`, for two vectors or a vector and a scalar.
pub fn ge<A: LanePair<B>, B: Lanes<Elem = A::Elem>>(a: A, b: B) -> Mask {
    compare("ge", &a, &b, |x, y| x >= y)
}

/// Per feature `a < b`, for two vectors or a vector and a scalar.
pub fn lt<A: LanePair<B>, B: Lanes<Elem = A::Elem>>(a: A, b: B) -> Mask {
    compare("lt", &a, &b, |x, y| x < y)
}

/// Per feature `a <= b`, for two vectors or a vector and a scalar.
pub fn le<A: LanePair<B>, B: Lanes<Elem = A::Elem>>(a: A, b: B) -> Mask {
    compare("le", &a, &b, |x, y| x <= y)
}

/// Per feature `if mask { a } else { b }`: a vector as wide as the mask;
/// each arm is a vector of that width or a scalar (the same for every
/// feature). Both arms are computed, as in the compiled kernel; the
/// derivative flows only into the arm chosen. Two literal arms need their
/// type spelled for rustc (`select(m, 1.0f32, -1.0f32)`): a mask does not
/// carry the element type.
pub fn select<M: MaskArg, A: LanePair<B>, B: Lanes<Elem = A::Elem>>(mask: M, a: A, b: B) -> Vector<A::Elem> {
    let m = mask.bits();
    for (side, w) in [("left", a.width()), ("right", b.width())] {
        if let Some(w) = w {
            assert!(w == m.len(), "tiga::lang: `select` of a mask of width {} with a {side} arm of width {w}", m.len());
        }
    }
    Vector(m.iter().enumerate().map(|(i, &c)| if c { a.lane(i) } else { b.lane(i) }).collect())
}
