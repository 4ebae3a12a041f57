// An array column's value as the row stream carries it: its elements in the stored element
// type, little-endian, nested arrays flattened row-major. What numpy.asarray(value, dtype) makes
// of the same value in stoker.spark's Python writer is the reference: integers range-checked,
// floats rounded to the stored width (float16 to nearest, ties to even, as numpy; a finite
// value beyond the width's range is an error, where numpy would store infinity), a null float
// element NaN. Nested arrays are taken only for a fixed shape (ndarray:float32:3x4), each level
// of the length the shape says, so a ragged value is refused rather than stored flattened.
package stoker.spark;

import java.io.IOException;
import java.io.Serializable;
import java.util.Arrays;
import org.apache.spark.sql.catalyst.expressions.SpecializedGetters;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;

final class ArrayElements implements Serializable {
  private static final long serialVersionUID = 1L;

  interface Sink {
    void put(long bits, int size) throws IOException;
  }

  private final String column;
  private final String element;
  private final int size;
  private final long[] shape;  // the fixed shape, or null
  private final DataType leaf;   // the innermost Spark element type
  private final int depth;       // array levels in the Spark type (1: a flat array)

  ArrayElements(String column, DataType arrayType, String element, long[] shape) {
    this.column = column;
    this.element = element;
    this.size = elementSize(element);
    this.shape = shape;
    DataType t = arrayType;
    int levels = 0;
    while (t instanceof ArrayType) {
      t = ((ArrayType) t).elementType();
      levels++;
    }
    this.leaf = t;
    this.depth = levels;
  }

  // Bytes per element of a stored element type; 0: one the stream does not carry.
  static int elementSize(String element) {
    switch (element) {
      case "int8":
      case "uint8":
      case "bool":
        return 1;
      case "int16":
      case "uint16":
      case "float16":
        return 2;
      case "int32":
      case "uint32":
      case "float32":
        return 4;
      case "int64":
      case "uint64":
      case "float64":
        return 8;
      default:
        return 0;
    }
  }

  // Whether Spark values of `arrayType` can be stored as `element` with `shape` (null: any).
  static String refusal(DataType arrayType, String element, long[] shape) {
    ArrayElements e = new ArrayElements("", arrayType, element, shape);
    if (e.size == 0) return "the row stream does not carry " + element + " elements";
    boolean numeric = isIntegral(e.leaf) || e.leaf instanceof FloatType
        || e.leaf instanceof DoubleType;
    boolean floats = e.leaf instanceof FloatType || e.leaf instanceof DoubleType;
    if (element.equals("bool") ? !(e.leaf instanceof BooleanType)
        : !numeric || (floats && !element.startsWith("float"))) {
      return e.leaf.simpleString() + " elements cannot be stored as " + element;
    }
    if (e.depth > 1 && shape == null) {
      return "an array of " + e.depth + " levels needs a shape of " + e.depth
          + " dimensions in the type (e.g. ndarray:" + element + ":3x4)";
    }
    if (shape != null && shape.length != e.depth) {  // numpy.asarray's shape must be the type's
      return "an array of " + e.depth + " level" + (e.depth > 1 ? "s" : "") + " cannot have the "
          + shape.length + "-dimensional shape " + Arrays.toString(shape);
    }
    return null;
  }

  // The value's byte length on the stream (its elements, counted level by level).
  long byteLength(ArrayData a) {
    return count(a, 0) * size;
  }

  private long count(ArrayData a, int level) {
    int n = a.numElements();
    if (shape != null && n != shape[level]) {
      throw new IllegalArgumentException("column '" + column + "': level " + level
          + " has " + n + " elements, the shape " + shapeText() + " says " + shape[level]);
    }
    if (level == depth - 1) return n;
    long total = 0;
    for (int j = 0; j < n; j++) {
      if (a.isNullAt(j)) {
        throw new IllegalArgumentException(
            "column '" + column + "': a null inside an array of shape " + shapeText());
      }
      total += count(a.getArray(j), level + 1);
    }
    return total;
  }

  void write(ArrayData a, Sink out) throws IOException {
    write(a, 0, out);
  }

  private void write(ArrayData a, int level, Sink out) throws IOException {
    int n = a.numElements();
    for (int j = 0; j < n; j++) {
      if (level < depth - 1) {
        write(a.getArray(j), level + 1, out);
      } else {
        put(a, j, out);
      }
    }
  }

  private void put(ArrayData a, int j, Sink out) throws IOException {
    if (element.startsWith("float")) {  // a null element is NaN, as numpy.asarray makes it
      double v = a.isNullAt(j) ? Double.NaN : leaf instanceof FloatType ? a.getFloat(j)
          : leaf instanceof DoubleType ? a.getDouble(j) : (double) integral(a, j);
      long bits = size == 2 ? toHalf(v)
          : size == 4 ? Float.floatToRawIntBits((float) v) & 0xFFFFFFFFL
          : Double.doubleToRawLongBits(v);
      // A finite element that would round to infinity does not fit, as stoker.spark says.
      boolean infinite = size == 2 ? (bits & 0x7FFF) == 0x7C00
          : size == 4 && Float.isInfinite((float) v);
      if (infinite && Double.isFinite(v)) {
        throw new IllegalArgumentException("column '" + column + "': element " + j + " ("
            + v + ") does not fit " + element + " (largest "
            + (size == 2 ? "65504.0" : String.valueOf(Float.MAX_VALUE)) + ")");
      }
      out.put(bits, size);
      return;
    }
    if (a.isNullAt(j)) {
      throw new IllegalArgumentException("column '" + column + "': element " + j
          + " is null (" + element + " has no null; stoker.spark refuses it too)");
    }
    if (element.equals("bool")) {
      out.put(a.getBoolean(j) ? 1 : 0, 1);
      return;
    }
    long v = integral(a, j);
    boolean unsigned = element.startsWith("u");
    int bits = size * 8;
    boolean fits = unsigned ? v >= 0 && (bits == 64 || v < (1L << bits))
        : bits == 64 || (v >= -(1L << (bits - 1)) && v < (1L << (bits - 1)));
    if (!fits) {
      throw new IllegalArgumentException(
          "column '" + column + "': element " + j + " (" + v + ") does not fit " + element);
    }
    out.put(v, size);
  }

  // IEEE 754 half precision of a double, rounded to nearest with ties to even (numpy's
  // float64 -> float16): overflow to infinity, underflow through the subnormals to zero.
  static long toHalf(double d) {
    long bits = Double.doubleToRawLongBits(d);
    int sign = (int) ((bits >>> 48) & 0x8000);
    int exponent = (int) ((bits >>> 52) & 0x7FF);
    long mantissa = bits & 0xFFFFFFFFFFFFFL;
    if (exponent == 0x7FF) {  // infinity, or NaN keeping its top payload bits (as numpy)
      long payload = mantissa >>> 42;
      return sign | 0x7C00 | (mantissa == 0 ? 0 : payload == 0 ? 1 : payload);
    }
    int e = exponent - 1023 + 15;  // the half's biased exponent
    if (e >= 0x1F) return sign | 0x7C00;
    long significand = mantissa | (exponent == 0 ? 0 : 1L << 52);
    // Normal halves keep 10 of the 52 mantissa bits; subnormals count units of 2^-24.
    int shift = e > 0 ? 42 : 43 - e;
    if (shift > 62) return sign;
    long kept = e > 0 ? ((long) e << 10) | (mantissa >>> 42) : significand >>> shift;
    long rest = (e > 0 ? mantissa : significand) & ((1L << shift) - 1);
    long halfway = 1L << (shift - 1);
    if (rest > halfway || (rest == halfway && (kept & 1) != 0)) kept++;  // may carry: correct
    return sign | kept;
  }

  private String shapeText() {
    return shape == null ? "(none)" : Arrays.toString(shape);
  }

  private long integral(ArrayData a, int j) {
    return integral(a, j, leaf);
  }

  // Value `i` of a row or an array whose integral Spark type is `t`, as a long.
  static long integral(SpecializedGetters in, int i, DataType t) {
    if (t instanceof ByteType) return in.getByte(i);
    if (t instanceof ShortType) return in.getShort(i);
    if (t instanceof IntegerType) return in.getInt(i);
    return in.getLong(i);
  }

  static boolean isIntegral(DataType t) {
    return t instanceof ByteType || t instanceof ShortType || t instanceof IntegerType
        || t instanceof LongType;
  }
}
