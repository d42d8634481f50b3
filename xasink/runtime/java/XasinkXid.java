package xasink;

import java.util.Arrays;
import java.util.Base64;
import javax.transaction.xa.Xid;

/**
 * An XID with value equality (pgjdbc compares XIDs by equals), written in Java so that no
 * driver or JVM thread ever calls back into Python for it. A Python proxy XID made the JVM
 * call into the interpreter, e.g. to release it, which can abort a process at exit.
 */
public final class XasinkXid implements Xid {
    private final int formatId;
    private final byte[] gtrid;
    private final byte[] bqual;

    public XasinkXid(int formatId, byte[] gtrid, byte[] bqual) {
        this.formatId = formatId;
        this.gtrid = gtrid.clone();
        this.bqual = bqual.clone();
    }

    @Override
    public int getFormatId() {
        return formatId;
    }

    @Override
    public byte[] getGlobalTransactionId() {
        return gtrid.clone();
    }

    @Override
    public byte[] getBranchQualifier() {
        return bqual.clone();
    }

    @Override
    public boolean equals(Object other) {
        if (!(other instanceof Xid)) {
            return false;
        }
        Xid xid = (Xid) other;
        return formatId == xid.getFormatId()
                && Arrays.equals(gtrid, xid.getGlobalTransactionId())
                && Arrays.equals(bqual, xid.getBranchQualifier());
    }

    @Override
    public int hashCode() {
        return 31 * (31 * formatId + Arrays.hashCode(gtrid)) + Arrays.hashCode(bqual);
    }

    /** pgjdbc's gid, formatId_base64(gtrid)_base64(bqual), as xasink.xid.Xid prints it. */
    @Override
    public String toString() {
        Base64.Encoder encoder = Base64.getEncoder();
        return formatId + "_" + encoder.encodeToString(gtrid) + "_" + encoder.encodeToString(bqual);
    }
}
