// The row stream's writing side (docs/engines.md, "The row stream"; the reading side is
// src/dataset/row_stream.cc): the magic, then per row 0x01 and its values (a u32 length, then
// the bytes; 0xFFFFFFFF for none), then 0x00. Numbers little-endian.
package stoker.spark;

import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.ShortType;

final class RowStreamOutput implements AutoCloseable {
  private static final byte[] MAGIC = "STKROWS1".getBytes(StandardCharsets.US_ASCII);
  // A stream of no rows: the magic and the end marker.
  static final byte[] EMPTY = "STKROWS1\0".getBytes(StandardCharsets.US_ASCII);
  private final OutputStream out;
  private final byte[] scratch = new byte[8];

  RowStreamOutput(OutputStream raw) throws IOException {
    out = new BufferedOutputStream(raw, 1 << 20);
    out.write(MAGIC);
  }

  // Bytes per element of a stored element type; 0: one the stream does not carry.
  static int elementSize(String element) {
    switch (element) {
      case "int8":
      case "uint8":
        return 1;
      case "int16":
      case "uint16":
        return 2;
      case "int32":
      case "uint32":
      case "float32":
        return 4;
      case "int64":
      case "float64":
        return 8;
      default:
        return 0;
    }
  }

  void beginRow() throws IOException {
    out.write(1);
  }

  void end() throws IOException {
    out.write(0);
    out.flush();
  }

  void noValue() throws IOException {
    length(0xFFFFFFFFL);
  }

  void int64(long v) throws IOException {
    length(8);
    little(v, 8);
  }

  void float64(double v) throws IOException {
    length(8);
    little(Double.doubleToRawLongBits(v), 8);
  }

  void bytes(byte[] b) throws IOException {
    length(b.length);
    out.write(b);
  }

  // An array's elements as `element` (ints range-checked, floats rounded to float32 if asked).
  void array(String column, ArrayData a, DataType from, String element) throws IOException {
    int n = a.numElements();
    int size = elementSize(element);
    length((long) n * size);
    boolean toFloat = element.startsWith("float");
    for (int j = 0; j < n; j++) {
      if (a.isNullAt(j) && !toFloat) {
        throw new IllegalArgumentException("column '" + column + "': element " + j
            + " is null (integers have no null; NumPy, and so stoker.spark, refuses it too)");
      }
      if (toFloat) {  // a null element is NaN, as numpy.asarray makes it
        double v = a.isNullAt(j) ? Double.NaN : from instanceof FloatType ? a.getFloat(j)
            : from instanceof DoubleType ? a.getDouble(j) : (double) integral(a, j, from);
        if (size == 4) {
          little(Float.floatToRawIntBits((float) v) & 0xFFFFFFFFL, 4);
        } else {
          little(Double.doubleToRawLongBits(v), 8);
        }
        continue;
      }
      if (from instanceof FloatType || from instanceof DoubleType) {
        throw new IllegalArgumentException(
            "column '" + column + "': " + element + " elements from floats");
      }
      long v = integral(a, j, from);
      boolean unsigned = element.startsWith("u");
      int bits = size * 8;
      boolean fits = unsigned ? v >= 0 && (bits == 64 || v < (1L << bits))
          : bits == 64 || (v >= -(1L << (bits - 1)) && v < (1L << (bits - 1)));
      if (!fits) {
        throw new IllegalArgumentException(
            "column '" + column + "': element " + j + " (" + v + ") does not fit " + element);
      }
      little(v, size);
    }
  }

  private static long integral(ArrayData a, int j, DataType t) {
    if (t instanceof ByteType) return a.getByte(j);
    if (t instanceof ShortType) return a.getShort(j);
    if (t instanceof IntegerType) return a.getInt(j);
    return a.getLong(j);
  }

  private void length(long n) throws IOException {
    if (n > 0xFFFFFFFEL && n != 0xFFFFFFFFL) {
      throw new IllegalArgumentException("a value of " + n + " bytes (the stream's limit: 4 GiB)");
    }
    little(n, 4);
  }

  private void little(long v, int size) throws IOException {
    for (int k = 0; k < size; k++) scratch[k] = (byte) (v >>> (8 * k));
    out.write(scratch, 0, size);
  }

  @Override
  public void close() throws IOException {
    out.close();
  }
}
