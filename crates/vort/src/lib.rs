//! The VORT memory layer (DESIGN §2). Built on candle; see the layer issue for its scope.

pub use vort_math;
