package xasink;

import java.math.BigDecimal;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Types;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;

/**
 * Binds whole columns into a PreparedStatement's batch, so Python crosses into Java once
 * per chunk of rows instead of once per value. Used by xasink's generic batched path.
 */
public final class ColumnBinder {
    public static final int LONG = 0;
    public static final int DOUBLE = 1;
    public static final int BOOLEAN = 2;
    public static final int STRING = 3;
    public static final int BYTES = 4;
    public static final int DECIMAL = 5;
    public static final int DATE = 6;
    public static final int TIMESTAMP = 7;
    /** A string the server parses as the column's own type (PostgreSQL jsonb, int[], enum). */
    public static final int UNTYPED_STRING = 8;
    /** A date or timestamp as java.sql.Date / Timestamp (JDBC 4.0), for drivers without java.time. */
    public static final int SQL_DATE = 9;
    public static final int SQL_TIMESTAMP = 10;

    private ColumnBinder() {}

    /**
     * Adds rows [0, rows) to the statement's batch and executes the batch every
     * batchSize rows. Returns the number of rows added but not yet executed.
     */
    public static int addRows(
            PreparedStatement statement,
            Object[] columns,
            int[] kinds,
            int[] sqlTypes,
            boolean[][] nulls,
            int rows,
            int batchSize,
            int pending)
            throws SQLException {
        for (int row = 0; row < rows; row++) {
            for (int column = 0; column < columns.length; column++) {
                int index = column + 1;
                if (nulls[column] != null && nulls[column][row]) {
                    statement.setNull(index, sqlTypes[column]);
                    continue;
                }
                Object values = columns[column];
                switch (kinds[column]) {
                    case LONG:
                        statement.setLong(index, ((long[]) values)[row]);
                        break;
                    case DOUBLE:
                        statement.setDouble(index, ((double[]) values)[row]);
                        break;
                    case BOOLEAN:
                        statement.setBoolean(index, ((boolean[]) values)[row]);
                        break;
                    case STRING:
                        statement.setString(index, ((String[]) values)[row]);
                        break;
                    case UNTYPED_STRING:
                        statement.setObject(index, ((String[]) values)[row], Types.OTHER);
                        break;
                    case BYTES:
                        statement.setBytes(index, ((byte[][]) values)[row]);
                        break;
                    case DECIMAL:
                        statement.setBigDecimal(index, new BigDecimal(((String[]) values)[row]));
                        break;
                    case DATE:
                        statement.setObject(index, LocalDate.ofEpochDay(((long[]) values)[row]));
                        break;
                    case TIMESTAMP:
                        statement.setObject(index, localDateTime(((long[]) values)[row]));
                        break;
                    case SQL_DATE:
                        statement.setDate(
                                index,
                                java.sql.Date.valueOf(LocalDate.ofEpochDay(((long[]) values)[row])));
                        break;
                    case SQL_TIMESTAMP:
                        statement.setTimestamp(index, timestamp(((long[]) values)[row]));
                        break;
                    default:
                        throw new SQLException("unknown column kind " + kinds[column]);
                }
            }
            statement.addBatch();
            if (++pending >= batchSize) {
                statement.executeBatch();
                pending = 0;
            }
        }
        return pending;
    }

    private static LocalDateTime localDateTime(long micros) {
        return LocalDateTime.ofEpochSecond(
                Math.floorDiv(micros, 1_000_000L),
                (int) Math.floorMod(micros, 1_000_000L) * 1000,
                ZoneOffset.UTC);
    }

    /** The same wall-clock fields as a java.sql.Timestamp (the JVM runs in UTC). */
    private static java.sql.Timestamp timestamp(long micros) {
        return java.sql.Timestamp.valueOf(localDateTime(micros));
    }
}
