/*
 * streams.pml: one sink, two streaming queries, two batch ids each (xasink/sinks.py and
 * Journal.decide_commit / _advance_sink in xasink/journal.py).
 *
 * Query Q[0] writes its batches 0 and 1 into sink S. Query Q[1] writes its own batches 0
 * and 1 (new rows) into the same sink: a restart after its checkpoint was deleted (Spark
 * gives it a new query id and starts again at batch 0) or a second query given the same
 * sink id. The two run in any interleaving. Spark runs a query's batches in order, replays
 * a batch after a crash between the sink's answer and its own commit log (even one the
 * sink already reported done), and stops the query on an error.
 *
 * Each batch is one job. sink.pml checks two jobs racing for one batch, crashes and
 * recovery; here a job's steps are: read the mark (decided_already), register the job,
 * decide (the mark moves in the decision's own transaction, only if it is below the batch
 * and was not written by another query), commit.
 *
 * The mark holds (batch, query). With -DNO_QUERY_ID the query ids are unknown (foreach_batch
 * under Spark Connect): the batch rule alone must keep rows from being lost, for a second
 * query that starts below the mark (Q[1] starts once Q[0] has its batch 1 decided: a batch
 * id equal to the mark cannot be told from a replay without the query id; README says so).
 *
 * Asserted at the end of every interleaving: no batch reported done (written or skipped) has
 * its rows missing, none is written twice, and a skip is only ever the query's own batch.
 * Mutants: -DMUTANT_SKIP_OLD (the old code): no query id is compared, and a batch at or
 * below the mark is skipped as "already committed". -DMUTANT_NO_QUERY_CHECK: batches below
 * the mark are refused, but the query id is not compared: another query's batch equal to
 * the mark passes for a replay and is skipped.
 */

#define NQ 2
#define NB 2
#define NOBODY 255
#define NO_BATCH 255

#define A_NONE    0               /* not run, or stopped by an error (nothing claimed) */
#define A_WRITTEN 1
#define A_SKIPPED 2

byte mark = NO_BATCH;             /* xasink_sinks.batch_id (NO_BATCH: no row yet) */
byte mark_query = NOBODY;         /* xasink_sinks.query_id */
byte rows[NQ * NB];               /* how often batch b of query q reached the table */
byte answer[NQ * NB];
bit q0_second_decided;            /* ghost: Q[0]'s batch 1 is decided */

#ifdef NO_QUERY_ID
#define QID(q) NOBODY              /* Spark did not say */
#else
#define QID(q) (q)
#endif

/* sinks.refusal: another query's mark (both known), or a batch below the mark */
#ifdef MUTANT_NO_QUERY_CHECK
#define FOREIGN(q)    0
#else
#define FOREIGN(q)    (mark_query != NOBODY && QID(q) != NOBODY && mark_query != QID(q))
#endif
#define REFUSED(q, b) (mark != NO_BATCH && (FOREIGN(q) || mark > (b)))

/* One job writing batch b of query q. Returns through `res`: A_WRITTEN, A_SKIPPED or A_NONE. */
inline job(q, b, res) {
  res = A_NONE;
  atomic {                                       /* decided_already: read the mark */
#ifdef MUTANT_SKIP_OLD
    if
    :: mark != NO_BATCH && mark >= (b) -> res = A_SKIPPED
    :: else
    fi
#else
    if
    :: REFUSED(q, b) -> res = A_NONE; refused = 1   /* SinkConflictError */
    :: !REFUSED(q, b) && mark == (b) -> res = A_SKIPPED  /* a replay: finished, skipped */
    :: else
    fi
#endif
  }
  if
  :: res == A_NONE && !refused ->
       /* begin_job; branches prepare; then decide_commit: one local transaction */
       atomic {
#ifdef MUTANT_SKIP_OLD
         if
         :: mark == NO_BATCH || mark < (b) -> mark = b; mark_query = QID(q); res = A_WRITTEN
         :: else                                 /* BATCH_TAKEN: nothing written */
         fi
#else
         if
         :: (mark == NO_BATCH || mark < (b)) && !FOREIGN(q) ->
              mark = b;
              if :: QID(q) != NOBODY -> mark_query = QID(q) :: else fi;
              res = A_WRITTEN
         :: else                                 /* BATCH_TAKEN: nothing written */
         fi
#endif
         if :: res == A_WRITTEN && q == 0 && b == 1 -> q0_second_decided = 1 :: else fi
       }
       if :: res == A_WRITTEN -> rows[(q) * NB + (b)]++ :: else fi   /* phase 2, finish */
  :: else
  fi;
  refused = 0
}

proctype Q(byte q) {
  byte b = 0, res;
  bit refused;
#ifdef NO_QUERY_ID
  if :: q == 1 -> q0_second_decided :: else fi  /* see the header */
#endif
  do
  :: b < NB ->
       job(q, b, res);
       if
       :: res == A_NONE -> goto stopped           /* the query fails; nothing claimed */
       :: else -> answer[q * NB + b] = res
       fi;
       if
       :: job(q, b, res);                         /* Spark replays the batch it was told */
          if                                      /* is done (no commit log yet) */
          :: res == A_NONE -> goto stopped
          :: else
          fi
       :: skip
       fi;
       b++
  :: b == NB -> break
  od;
stopped:
  skip
}

init {
  byte k;
  atomic { run Q(0); run Q(1) }
  (_nr_pr == 1);
  for (k : 0 .. NQ * NB - 1) {
    assert(rows[k] <= 1);                             /* never written twice */
    assert(answer[k] == A_NONE || rows[k] == 1)       /* done means its rows are in */
  }
}
