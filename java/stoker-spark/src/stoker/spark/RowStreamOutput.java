// The row stream's writing side (docs/engines.md, "The row stream"; the reading side is
// src/dataset/row_stream.cc): the magic, then per row 0x01 and its values (a u32 length, then
// the bytes; 0xFFFFFFFF for none), then 0x00. Numbers little-endian.
package stoker.spark;

import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.catalyst.util.ArrayData;

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

  // An array column's value: its elements as `elements` says (ArrayElements).
  void array(ArrayData a, ArrayElements elements) throws IOException {
    length(elements.byteLength(a));
    elements.write(a, this::little);
  }

  private void length(long n) throws IOException {
    if (n > 0xFFFFFFFEL && n != 0xFFFFFFFFL) {
      throw new IllegalArgumentException("a value of " + n + " bytes (the stream's limit: 4 GiB)");
    }
    little(n, 4);
  }

  private void little(long v, int size) throws IOException {  // also ArrayElements.Sink
    for (int k = 0; k < size; k++) scratch[k] = (byte) (v >>> (8 * k));
    out.write(scratch, 0, size);
  }

  @Override
  public void close() throws IOException {
    out.close();
  }
}
