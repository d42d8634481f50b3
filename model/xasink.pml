/*
 * xasink.pml: the exactly-once protocol of xasink (write_xa + recovery) as a Promela model.
 *
 * One job, 2 partitions x 2 task attempts (4 branches, b = 2*p + a), one foreign prepared
 * branch, the driver D with its heartbeat H, the writers W[b], two concurrent recovery runs R,
 * server restarts and the in-flight decision (actor DB), optionally an administrator rolling
 * back one prepared branch (-DADMIN). Every actor may crash between any two steps. Once all of
 * them have stopped, one fault-free recovery runs and the invariants S1-S7 (model/README.md)
 * are asserted.
 *
 * One step = one SQL statement, local transaction, XA call, XA RECOVER listing or journal read.
 * Work inside a branch (start, rows, staged checks, marker INSERT, END) is invisible to others
 * until the branch commits, so it is merged into the writer's neighbouring step.
 *
 * Switches: -DSTAGED (overwrite/upsert/merge; default append); -DADMIN; -DMARIADB (prepared
 * branches stay attached: XAER_NOTA while listed); -DREPLY_LOST (an XA COMMIT's reply is lost);
 * -DRESTART (one server restart); -DHEARTBEAT (H as a process instead of folded in); -DBUSY
 * (XA COMMIT takes two steps, and a second finisher meanwhile is answered "busy"); scope:
 * -DNO_R2, -DNO_LOSER1, -DNO_LOSER3, -DNO_AMBIGUOUS, -DD_STOPS_AT_DECISION; and one of
 * -DMUTANT_A, -DMUTANT_B, -DMUTANT_C, -DMUTANT_F, -DMUTANT_BUSY (each re-introduces one
 * old bug).
 * model/check.sh lists the configurations that `make model` verifies.
 * See model/README.md for the step -> code mapping.
 */

#define NB      4          /* our branches: b = 2*p + a */
#define FOREIGN 4          /* a prepared branch of another application / journal tag */
#define W0      0          /* the winning attempt of partition 0 */
#define W1      2          /* the winning attempt of partition 1 */
#define WINNERS 5          /* (1 << W0) | (1 << W1) */

/* branch states */
#define B_NONE   0
#define B_ACTIVE 1
#define B_PREP   2
#define B_COMMIT 3
#define B_RB     4

/* job states (J_NONE: no row yet) */
#define J_NONE       0
#define J_RUNNING    1
#define J_COMMITTING 2
#define J_COMMITTED  3
#define J_ABORTED    4

/* a writer's message to the driver */
#define M_NONE  0
#define M_OK    1
#define M_ENDED 2          /* problem "job is no longer running" (branch rolled back) */

/* what write_xa answered */
#define A_NONE      0      /* crashed, or an error that claims nothing (CommitError) */
#define A_OK        1
#define A_PRE       2      /* pre-decision error: JobAbortedError, InputDataError, phase 1 failed */
#define A_UNKNOWN   3      /* DecisionUnknownError: claims nothing */
#define A_LOST      4      /* LostBranchError: these branches' rows are NOT in the table */
#define A_UNAPPLIED 5      /* staged: nothing applied, target unchanged */
#define A_ERR       6      /* CommitError: a winner could not be committed now */

/* progress of one phase-2 call (BranchOps.commit / rollback) */
#define O_NONE      0      /* (re)issue XA COMMIT */
#define O_NOTA      1      /* XAER_NOTA: ask XA RECOVER */
#define O_GONE      2      /* not listed: read the marker */
#define O_NOMARK    3      /* no marker: read the job state */
#define O_COMMITTED 4
#define O_ALREADY   5
#define O_LOST      6
#define O_ERR       7      /* gave up (still attached after the retries, TRANSIENT) */
#define O_ROLLED    8
#define O_INFLIGHT  9      /* -DBUSY: this actor's XA COMMIT is running on the server */
#define O_BUSY      10     /* -DBUSY: another session is finishing the branch right now */

#ifdef STAGED
#define STAGED_JOB 1
#else
#define STAGED_JOB 0
#endif

/* ---- durable state (the database) and ghost variables ---- */
byte br[NB + 1];           /* branch states; br[FOREIGN] stays B_PREP */
byte att;                  /* MariaDB: prepared branch still attached to its session */
byte markers;              /* visible marker rows (inserted inside the branch) */
byte winm;                 /* xasink_winners */
byte job = J_NONE;
byte beats;
bit pending;               /* the decision's local commit is in flight (holds the row lock) */
byte pwinm;                /* its winners */
bit decided;               /* ghost: the decision landed */
byte applied;              /* staged: how often the stage was applied */
byte msg[NB];              /* messages to the driver (Spark task results) */
byte gx;                   /* -DBUSY: branches whose XA COMMIT is running on the server */
bit slow;                  /* -DBUSY: one such COMMIT took longer than the lock wait */

/* ---- what the actors said ---- */
byte d_answer = A_NONE;
bit d_done;
byte d_lost;               /* D: "rows of these branches are NOT in the table" */
bit d_unapplied;           /* D: "nothing applied, target unchanged" */
byte r_lost;               /* R: reported LOST */
bit r_failed;              /* R: reported FAILED for a winner (could not commit it now) */
byte adminrb;              /* branches the administrator rolled back */
byte restarts;

#define BIT(m, b)  (((m) >> (b)) & 1)
#ifdef MARIADB
#define ATTACH(b)  att = att | (1 << (b))         /* attached until the disconnect is processed */
#else
#define ATTACH(b)  skip                           /* PostgreSQL, MySQL 8: detached at PREPARE */
#endif
#define ATT(b)     BIT(att, b)
#define WIN(b)     BIT(winm, b)
#define MARK(b)    BIT(markers, b)

/* A crash (or an error that ends the actor claiming nothing) between two steps. */
#define CRASH      if :: crashable -> goto dead :: skip fi

/* XA RECOVER, filtered to this journal's tag and this job (never the foreign branch). */
inline listing(l) {
  d_step {
    l = 0;
    for (k : 0 .. NB - 1) { if :: br[k] == B_PREP -> l = l | (1 << k) :: else fi };
    k = 0
  }
}

/*
 * BranchOps.commit(b): XA COMMIT; XAER_NOTA -> _settle's listing (still listed: back off and
 * retry, bounded); not listed -> settled(): marker read, then job-state read.
 * Result in `out`. Used by D (commit_group) and R (_roll_forward).
 */
inline commit_branch(b) {                        /* caller sets out = O_NONE (or O_GONE) */
  do
  :: out == O_NONE ->
     atomic {                                     /* XA COMMIT */
       if
#ifdef BUSY
       :: br[b] == B_PREP && BIT(gx, b) -> out = O_BUSY  /* PostgreSQL 55000 "is busy" */
       :: br[b] == B_PREP && !ATT(b) && !BIT(gx, b) ->
            assert(WIN(b) && decided);            /* S1 only winners, S2 decision first */
            gx = gx | (1 << b); out = O_INFLIGHT  /* the server finishes it, whatever we do */
#else
       :: br[b] == B_PREP && !ATT(b) ->
            assert(WIN(b) && decided);            /* S1 only winners, S2 decision first */
            br[b] = B_COMMIT;
            markers = markers | (1 << b);
#ifdef REPLY_LOST
            if
            :: out = O_COMMITTED
            :: out = O_NOTA                       /* reply lost; the retry gets XAER_NOTA */
            fi
#else
            out = O_COMMITTED
#endif
#endif
       :: br[b] == B_RB ->
            if :: out = O_NOTA :: out = O_LOST fi /* XAER_NOTA, or XA_RB* */
       :: else -> out = O_NOTA                    /* committed, or attached (MariaDB) */
       fi
     }
#ifdef BUSY
  :: out == O_INFLIGHT ->
     atomic {                                     /* the server completes it and replies */
       if
       :: BIT(gx, b) -> br[b] = B_COMMIT; markers = markers | (1 << b); gx = gx & ~(1 << b)
       :: else                                    /* completed already (DB step below) */
       fi;
       out = O_COMMITTED
     }
  :: out == O_BUSY ->
#ifdef MUTANT_BUSY
     out = O_ERR                                  /* old: XAER_RMERR, not retried */
#else
     CRASH;
     if                                           /* _settle: back off while it is held */
     :: atomic {
          !BIT(gx, b) ->                          /* then XA RECOVER */
            if
            :: br[b] == B_PREP -> out = O_NONE    /* still listed: COMMIT again */
            :: else -> out = O_GONE               /* finished there: settled by its marker */
            fi
        }
     :: slow -> out = O_ERR                       /* held past the lock wait: TRANSIENT */
     fi
#endif
#endif
  :: out == O_NOTA ->
     CRASH;
     atomic {                                     /* _settle: XA RECOVER */
       if
       :: br[b] == B_PREP -> if :: out = O_NONE :: out = O_ERR fi
       :: else -> out = O_GONE
       fi
     }
  :: out == O_GONE ->
     CRASH;
     atomic { if :: MARK(b) -> out = O_ALREADY :: else -> out = O_NOMARK fi }  /* marker */
  :: out == O_NOMARK ->
#ifdef MUTANT_B
     out = O_LOST                                 /* old: no marker = LOST */
#else
     CRASH;
     atomic { if :: job == J_COMMITTED -> out = O_ALREADY :: else -> out = O_LOST fi }
#endif
  :: out >= O_COMMITTED && out <= O_ROLLED -> break
  od
}

#define LOWEST(m)  (((m) & 1) -> 0 : (((m) & 2) -> 1 : (((m) & 4) -> 2 : 3)))

/* Roll back every branch in mask m, one XA ROLLBACK each (m is consumed). */
#define ROLLBACK_ALL(m) \
  do \
  :: m == 0 -> break \
  :: else -> CRASH; atomic { k = LOWEST(m); m = m & ~(1 << k); rollback_branch(k); k = 0; out = 0 } \
  od

/* BranchOps.rollback(b), one XA ROLLBACK (its NOTA retries folded in). */
inline rollback_branch(b) {
  atomic {
    !BIT(gx, b);                                  /* busy: back off until it is finished */
    if
    :: br[b] == B_PREP && !ATT(b) ->
         assert(!WIN(b) || job == J_ABORTED);     /* never roll back a decided winner */
         br[b] = B_RB; out = O_ROLLED
    :: br[b] == B_PREP && ATT(b) -> out = O_ERR   /* still attached: left for later */
    :: else -> out = O_ROLLED                     /* already gone */
    fi
  }
}

/* Journal.finish: one local transaction. */
inline finish(changed) {
  atomic {
    !pending;
    if
    :: job == J_COMMITTING ->
         changed = 1;
         job = J_COMMITTED;
         for (k : 0 .. NB - 1) {                  /* caller proved every winner committed */
           assert(!WIN(k) || br[k] == B_COMMIT)   /* S3 / S4: the stage is complete */
         };
         k = 0;
         if :: STAGED_JOB -> applied++; assert(applied == 1) :: else fi;
         markers = markers & ~winm                /* delete the winners' markers */
    :: else -> changed = 0
    fi
  }
}

/* Journal.abandon: COMMITTING -> ABORTED, staged jobs only. */
inline abandon(changed) {
  atomic {
    !pending;
    if
    :: job == J_COMMITTING && STAGED_JOB -> job = J_ABORTED; changed = 1
    :: else -> changed = 0
    fi
  }
}

/* ------------------------------------------------------------------------------------- */
/* Writer W[b] (writer.py _write_branch), partition b/2, task attempt b%2.                  */
proctype W(byte b) {
  bit crashable = 1;
  if
  :: job != J_NONE                                /* the Spark job runs after begin_job */
  :: goto dead                                    /* this attempt never runs */
  fi;
  atomic {                                        /* xa_start, load rows, staged checks, */
    br[b] = B_ACTIVE;                             /* then job_is_running: plain SELECT */
    if
    :: job != J_RUNNING ->                        /* end(TMFAIL) + rollback, report it */
         br[b] = B_RB; msg[b] = M_ENDED; goto dead
    :: else
    fi
  }
  CRASH;
  atomic {                                        /* marker INSERT, xa_end, xa_prepare, and */
    if                                            /* the result reaches the scheduler (a     */
    :: br[b] == B_ACTIVE ->                       /* prepared, unreported branch is one whose */
         br[b] = B_PREP; ATTACH(b);                /* result is never picked)                  */
         msg[b] = M_OK
    :: else -> goto dead                          /* rolled back by a server restart */
    fi
  }
  CRASH;                                          /* e.g. executor lost: session dropped */
dead:
  atomic {                                        /* disconnect processed by the server */
    if :: br[b] == B_ACTIVE -> br[b] = B_RB :: else fi;
    att = att & ~(1 << b);
    crashable = 0
  }
}

/* ------------------------------------------------------------------------------------- */
/* Driver D (api.py write_xa); the scheduler's choice of one result per partition folded in. */
proctype D() {
  bit crashable = 1;
  byte k, out, lst, lostm, st;
  bit err, changed;

  job = J_RUNNING;                                /* begin_job; heartbeat starts */
  CRASH;
  /* phase 1 (_prepare_all: collect, _winners): the first result of each partition wins.
     The two attempts of a partition are interchangeable, so without loss of generality the
     winner is attempt 0 (branches 0 and 2); attempts 1 (branches 1, 3) are the losers:
     failed, speculative or zombie attempts that may prepare at any time, even late. */
  if
  :: msg[W0] != M_NONE && msg[W1] != M_NONE
  :: goto abort_path                              /* the Spark job failed */
  :: goto dead
  fi;
  if
  :: msg[W0] == M_ENDED || msg[W1] == M_ENDED -> goto abort_path  /* JobAbortedError */
  :: else
  fi;
  CRASH;                                          /* before_decision */
  /* _decide */
  if
  :: atomic {                                     /* decide_commit: one local transaction */
       !pending;
       if
       :: job == J_RUNNING ->
            job = J_COMMITTING; winm = WINNERS; decided = 1; st = 1
       :: else -> st = 0
       fi
     }
     if :: st == 0 -> goto abort_path :: else -> goto phase2 fi
#ifndef NO_AMBIGUOUS
  :: atomic {                                     /* its commit fails ambiguously */
       !pending;
       if :: job == J_RUNNING -> pending = 1; pwinm = WINNERS :: else fi
     }
#endif
  fi;
  CRASH;
#ifndef MUTANT_F
  /* _fence -> Journal.fence_decision on a fresh connection */
  if
  :: atomic {                                     /* conditional abort, waits on the row lock */
       if                                         /* so the in-flight decision lands first... */
       :: pending -> job = J_COMMITTING; winm = pwinm; decided = 1; pending = 0
       :: pending -> pending = 0                  /* ...or never */
       :: else
       fi;
       if :: job == J_RUNNING -> job = J_ABORTED; st = 1 :: else -> st = 0 fi
     }
     if :: st == 1 -> goto abort_path :: else fi; /* JobAbortedError */
     CRASH;
     st = job;                                    /* state read */
     if
     :: st == J_COMMITTING -> goto phase2
     :: st == J_ABORTED -> goto abort_path
     :: else -> d_answer = A_UNKNOWN; goto dead
     fi
  :: d_answer = A_UNKNOWN; goto dead              /* cannot reach the database */
  fi;
#else
  st = job;                                       /* old: plain read, misses the in-flight commit */
  if
  :: st == J_COMMITTING -> goto phase2
  :: else -> d_answer = A_PRE; goto dead          /* raw error; the abort on the dead connection fails */
  fi;
#endif

abort_path:                                       /* _abort, then re-raise (pre-decision error) */
  CRASH;
  atomic { !pending; if :: job == J_RUNNING -> job = J_ABORTED :: else fi }  /* journal.abort */
  CRASH;
  st = job;                                       /* journal.state */
  if :: st != J_ABORTED -> d_answer = A_PRE; goto dead :: else fi;
  CRASH;
  listing(lst);                                   /* _roll_back_others(keep=none) */
  ROLLBACK_ALL(lst);
  d_answer = A_PRE;
  goto dead;

phase2:                                           /* _commit_all -> commit_group */
#ifdef D_STOPS_AT_DECISION
  goto dead;                                      /* R/R2-race configuration */
#endif
  CRASH;
  out = O_NONE;
  commit_branch(W0);
  if :: out == O_LOST -> lostm = lostm | (1 << W0) :: out == O_ERR -> err = 1 :: else fi;
  CRASH;                                          /* after_first_commit */
  out = O_NONE;
  commit_branch(W1);
  if :: out == O_LOST -> lostm = lostm | (1 << W1) :: out == O_ERR -> err = 1 :: else fi;
  if :: err -> d_answer = A_ERR; goto dead :: else fi;  /* CommitError */
  CRASH;
  listing(lst);                                   /* _roll_back_others(keep=winners) */
  lst = lst & ~WINNERS;
  ROLLBACK_ALL(lst);
  if
  :: lostm != 0 ->                                /* _raise_lost */
       CRASH;
       abandon(changed);
       atomic {
         if
         :: changed -> d_unapplied = 1; d_answer = A_UNAPPLIED
         :: else -> d_lost = lostm; d_answer = A_LOST
         fi
       }
       goto dead
  :: else
  fi;
  CRASH;                                          /* before_finish */
  finish(changed);                                /* _finish */
  if :: changed -> d_answer = A_OK; goto dead :: else fi;
  CRASH;
  st = job;
  if
  :: st == J_COMMITTED -> d_answer = A_OK         /* another process finished it */
  :: else -> d_unapplied = 1; d_answer = A_UNAPPLIED
  fi;
dead:
  atomic { d_done = 1; crashable = 0; k = 0; out = 0; lst = 0; lostm = 0; st = 0;
           err = 0; changed = 0 }
}

/* Heartbeat H: one beat (beats matter only to make a recovery's conditional abort fail). */
proctype H() {
  if
  :: atomic { !d_done && !pending && beats == 0 && (job == J_RUNNING || job == J_COMMITTING) ->
              beats = 1 }
  :: skip
  fi
}

/* The server: one restart (active branches roll back, attachments end, prepared survive);
   the in-flight decision lands or not. */
proctype DB() {
  byte k;
  do
#ifdef RESTART
  :: atomic {
       restarts == 0 -> restarts = 1;
       for (k : 0 .. NB - 1) { if :: br[k] == B_ACTIVE -> br[k] = B_RB :: else fi };
       k = 0; att = 0
     }
#endif
  :: atomic { pending -> job = J_COMMITTING; winm = pwinm; decided = 1; pending = 0 }
  :: atomic { pending -> pending = 0 }
#ifdef BUSY
  :: atomic { gx != 0 && !slow -> slow = 1 }      /* e.g. a stalled synchronous standby */
  :: atomic {                                     /* a running XA COMMIT completes */
       gx != 0 -> k = LOWEST(gx); br[k] = B_COMMIT; markers = markers | (1 << k);
       gx = gx & ~(1 << k); k = 0
     }
#endif
  :: d_done && !pending && gx == 0 -> break
  od
}

#ifdef ADMIN
/* An administrator rolls back one prepared branch (XA ROLLBACK / ROLLBACK PREPARED). */
proctype Admin() {
  if
  :: atomic { br[0] == B_PREP && !ATT(0) -> br[0] = B_RB; adminrb = 1 }
  :: atomic { br[1] == B_PREP && !ATT(1) -> br[1] = B_RB; adminrb = 2 }
  :: atomic { br[2] == B_PREP && !ATT(2) -> br[2] = B_RB; adminrb = 4 }
  :: atomic { br[3] == B_PREP && !ATT(3) -> br[3] = B_RB; adminrb = 8 }
  :: skip
  fi
}
#endif

/* ------------------------------------------------------------------------------------- */
/* Recovery R (recovery.py resolve_in_doubt); final = the last, fault-free run.            */
proctype R(bit final) {
  bit crashable = 1;
  byte k, out, lst, l0, rstate, rbeats, rwin, looks, lostm;
  bit unres, changed;

  crashable = !final;
#ifdef MUTANT_C
  if
  :: !final ->                                    /* old: exists() failed -> "no journal" */
       listing(l0);                               /* presume abort for the tag, no grace */
       ROLLBACK_ALL(l0);
       goto dead
  :: skip
  fi;
#endif
  /* discovery (resolve_in_doubt): is our job a candidate? Only the final run needs it: a
     crash of R at its first step is the same as "not a candidate". MUTANT_A keeps l0. */
#ifndef MUTANT_A
  if
  :: final ->
#endif
       listing(l0);                               /* ops.prepared() */
       CRASH;
       if
       :: l0 == 0 && job == J_COMMITTING          /* jobs_in_state(COMMITTING) */
       :: l0 == 0 && job != J_COMMITTING ->
            CRASH;
            if
            :: job == J_RUNNING                   /* running() */
            :: else -> goto dead
            fi
       :: else
       fi;
       CRASH;
#ifndef MUTANT_A
  :: else
  fi;
#endif
  /* write_xa's startup recovery (job.nothing_in_doubt) first reads the job row, then
     counts prepared transactions in xasink's format (not the foreign one), and stops when
     both are quiet. It only reads, so stopping is the same as a crash here; the final run
     (`xasink recover`) never probes. */
  if
  :: !final ->
       rstate = job;                              /* journal.table_settled */
       CRASH;
       listing(lst);                              /* dialect.prepared_count */
       if
       :: rstate != J_RUNNING && rstate != J_COMMITTING && lst == 0 -> goto dead
       :: else -> CRASH
       fi
  :: skip                                         /* `xasink recover`: no probe */
  fi;

look:                                             /* _Resolver.resolve */
  atomic { rstate = job; rbeats = beats; rwin = winm }  /* journal.job: row, then winners */
  CRASH;
#ifdef MUTANT_A
  lst = l0;                                       /* old: the listing from before the row read */
#else
  listing(lst);                                   /* ops.prepared_of(job): fresh */
  CRASH;
#endif
  if
  :: rstate == J_ABORTED -> ROLLBACK_ALL(lst); goto dead
  :: rstate == J_COMMITTING || rstate == J_COMMITTED -> goto roll_forward
  :: rstate == J_RUNNING ->
       if
       :: !final -> goto dead                     /* alive (heartbeat younger than grace) */
       :: skip                                    /* looks_dead: any time with --grace 0 */
       fi;
       atomic {                                   /* journal.abort(beats=b), waits on the lock */
         !pending;
         if
         :: job == J_RUNNING && beats == rbeats -> job = J_ABORTED
#ifndef HEARTBEAT
         :: job == J_RUNNING && !d_done -> skip   /* H beat since the row was read */
#endif
         :: else
         fi
       }
       CRASH;
       looks++;
       if :: looks < 3 -> goto look :: else -> goto dead fi  /* LEFT: kept changing */
  :: else -> goto dead                            /* no row: cannot happen for our job */
  fi;

roll_forward:                                     /* _roll_forward */
  atomic {
    l0 = rwin & ~lst;                             /* winners NOT in the fresh listing */
    rwin = rwin & lst;                            /* listed winners: commit */
    lst = lst & ~rwin                             /* listed non-winners: roll back */
  }
  do
  :: lst == 0 -> break
  :: else ->
       CRASH;
       atomic { k = LOWEST(lst); lst = lst & ~(1 << k); rollback_branch(k);
                if :: out == O_ERR -> unres = 1 :: else fi; k = 0; out = 0 }
  od;
  do
  :: rwin == 0 -> break
  :: else ->
       CRASH;
       d_step { k = LOWEST(rwin); rwin = rwin & ~(1 << k); out = O_NONE }
       commit_branch(k);
       atomic {
         if
         :: out == O_LOST -> assert(br[k] == B_RB); r_lost = r_lost | (1 << k);
                             lostm = lostm | (1 << k)
         :: out == O_ERR -> unres = 1; r_failed = 1
         :: else
         fi;
         k = 0; out = 0
       }
  od;
  if :: rstate != J_COMMITTING -> goto dead :: else fi;
  /* winners not in the fresh listing: settled() = marker read, then job-state read */
  do
  :: l0 == 0 -> break
  :: else ->
       CRASH;
       d_step { k = LOWEST(l0); l0 = l0 & ~(1 << k); out = O_GONE }
       commit_branch(k);                          /* enters at the marker read */
       atomic {
         if
         :: out == O_LOST -> assert(br[k] == B_RB); r_lost = r_lost | (1 << k);
                             lostm = lostm | (1 << k)
         :: else
         fi;
         k = 0; out = 0
       }
  od;
  if
  :: lostm != 0 -> CRASH; abandon(changed); goto dead  /* _abandon_if_staged */
  :: unres -> goto dead
  :: else
  fi;
  CRASH;
  finish(changed);                                /* _finish */
dead:
  atomic { crashable = 0; k = 0; out = 0; lst = 0; l0 = 0; rstate = 0; rbeats = 0; rwin = 0;
           looks = 0; lostm = 0; unres = 0; changed = 0 }
}

/* ------------------------------------------------------------------------------------- */
init {
  byte k;
  atomic {
    br[FOREIGN] = B_PREP;
    run D(); run DB();
#ifdef HEARTBEAT
    run H();
#endif
    run W(0); run W(2);
#ifndef NO_LOSER1
    run W(1);
#endif
#ifndef NO_LOSER3
    run W(3);
#endif
    run R(0);
#ifndef NO_R2
    run R(0);
#endif
#ifdef ADMIN
    run Admin();
#endif
  }
  _nr_pr == 1;                                    /* everything has stopped */
  run R(1);                                       /* the final, fault-free recovery */
  _nr_pr == 1;
  d_step {
    assert(br[FOREIGN] == B_PREP);                /* S6: foreign branches untouched */
    for (k : 0 .. NB - 1) {
      assert(br[k] != B_PREP && br[k] != B_ACTIVE);  /* nothing left in doubt */
      assert(!(br[k] == B_COMMIT) || WIN(k));     /* S1 */
      assert(!BIT(d_lost, k) || br[k] != B_COMMIT);  /* S5: D's LOST claims */
      assert(!BIT(r_lost, k) || br[k] != B_COMMIT);  /* S6: R's LOST claims */
      if
      :: job == J_COMMITTED -> assert(!WIN(k) || br[k] == B_COMMIT)  /* S3 */
      :: job == J_ABORTED && !STAGED_JOB -> assert(br[k] != B_COMMIT)  /* S3 */
      :: else
      fi
    };
    k = 0;
    /* the job ends COMMITTED or ABORTED (J_NONE: D died before begin_job); COMMITTING only
       for an append job with a lost winner (an operator's `xasink resolve --abandon`) */
    assert(job == J_COMMITTED || job == J_ABORTED || job == J_NONE
           || (job == J_COMMITTING && !STAGED_JOB && (adminrb & winm) != 0));
    assert(!decided || job != J_RUNNING);
    /* S2/S3: without an administrator, a decided job always commits */
    assert(adminrb != 0 || !decided || job == J_COMMITTED);
    /* S4: staged apply at most once, applied iff committed */
    assert(applied <= 1);
    assert(!STAGED_JOB || ((applied == 1) == (job == J_COMMITTED)));
    assert(STAGED_JOB || applied == 0);
    /* S5: an honest driver */
    assert(d_answer != A_OK || (job == J_COMMITTED && (!STAGED_JOB || applied == 1)));
    /* a pre-decision error: the job never commits and nothing reached the target (a
       staged job decided, then abandoned after an admin rollback also answers this) */
    assert(d_answer != A_PRE || (job != J_COMMITTED && applied == 0 && (STAGED_JOB || !decided)));
    assert(!d_unapplied || (applied == 0 && STAGED_JOB));
    assert(d_answer != A_LOST || d_lost != 0);
#ifndef MARIADB
    /* S7, no false CommitError or FAILED: where branches never stay attached, a winner
       another session is finishing is waited for and settled, unless that session holds
       it longer than the lock wait (then the error is true: not committed yet) */
    assert((d_answer != A_ERR && !r_failed) || slow)
#endif
  }
}
