/*
 * participants.pml: a transaction over two databases, the coordinator C and one participant P.
 *
 * One job J. Each database has its own job row for J, its own branch of J (the winning
 * attempt of its write's one partition; with -DLOSER also a losing attempt in P, which may
 * prepare at any time once P's row exists, even after everything else: a zombie), its own
 * markers, and its side of the link: in C, a row for (J, P) (pending, then done; P's
 * winners recorded with the decision), in P a row naming C as J's coordinator. The
 * protocol's steps:
 *
 *   1. C: J running (begin_job);
 *   2. C's branch prepares;
 *   3. the first write into P: a. C: the link (J, P) pending, only while J is running in C
 *      (INSERT ... SELECT ... WHERE state = running); none inserted: J was aborted, fail;
 *      b. P: the coordinator link, then P's job row J running (an INSERT: it fails on a row
 *      already there); c. P's branch prepares;
 *   4. the decision, one local transaction in C: J running -> committing (conditional), C's
 *      winners, P's winners into the link row;
 *   5. the decision copied to P: P's J running -> committing with its winners (idempotent);
 *   6. phase 2 and finish in C, then in P (commit the winner, roll back the other attempts,
 *      J -> committed with the markers' DELETE);
 *   7. C: the link done.
 * A failure before step 4 aborts C's J first, then (once it is aborted) P's if P's row was
 * written, rolls back their branches and marks the link done. From step 4 on a failure
 * aborts nothing. A failure of step 3b itself (P's Job.begin raises: its recovery scan, or
 * after its row), before P is a member, first withdraws P: its row INSERTed aborted (a
 * fence) or, if begin wrote it, aborted; once P's J is aborted, the link done; then C's J
 * aborted as above (review 4, R5: the link stayed pending for ever).
 *
 * Actors, each of which may crash between any two steps:
 *   - D, the driver; before the decision it may also fail (the block raises, a write fails);
 *   - RC, a recovery from C with P (xasink recover --url C --participant P), concurrent:
 *     C's own resolution (a running J is taken as alive, or as silent and then aborted
 *     conditionally, as in xasink.pml), then the pending link: C's J running -> left;
 *     aborted -> P's J running -> aborted, or, when P has no row of J, that row INSERTed
 *     aborted (a fence: D's own INSERT of it then fails), P's branches rolled back;
 *     committing or committed -> the link's winners read (after C's state), the decision
 *     copied to P if P's J is still running, P rolled forward and finished; the link done
 *     once P's J is final;
 *   - RP, a recovery of P alone (xasink recover --url P, or a write's startup recovery in
 *     P), concurrent: a running J with a coordinator link is left, whatever its heartbeat; a
 *     committing one is rolled forward and finished; an aborted one's branches rolled back;
 *   - L (-DLOSER), the losing attempt in P;
 *   - PR (-DPRUNE), the participant's retention or an operator's `xasink prune` in P, at
 *     any moment: it deletes P's row of J once it is aborted (and with it P's side of the
 *     link), unless the row is RC's fence: a driver stalled before step 3b would otherwise
 *     write P's row after it. Committed rows are deleted only once they ended longer ago
 *     than the grace and the job's lease; in this model that is once everything has
 *     stopped, where deleting them changes nothing;
 *   - A and O (-DLOST_C): an administrator's XA ROLLBACK of C's winner behind xasink's back
 *     once it is decided (A, at any moment), and the operator's `xasink resolve J --abandon
 *     --linked` against C (O, concurrent, and once everything has stopped): if C's J is
 *     committing and its winner there is lost, J ends `abandoned` in C (conditional), then
 *     C's resolution. The decision stands: RC carries it to P as a commit.
 * Once everything has stopped, a fault-free recovery from C with P runs to completion, then
 * P's own resolution (as RP: a zombie that prepared after the link was done is only seen
 * there).
 *
 * One step = one SQL statement, local transaction, XA call, XA RECOVER listing or journal
 * read. A branch's work (start, rows, marker INSERT, END, PREPARE) is invisible until it
 * commits, so it is one step; the writer's plain read that J is running comes before it and
 * is left out (a branch may prepare after a recovery aborted J: the zombie window).
 *
 * Asserted:
 *   (1) all or nothing, at the end: C's branch committed iff P's is, and iff C's J was
 *       decided; nothing left prepared, both rows final (P's: or none), the link not
 *       pending, no marker left;
 *   (2) no branch commits (in P or C) before C's decision is recorded, and only a winner
 *       (at each XA COMMIT);
 *   (3) a branch whose decision is recorded in C (its winner) is never rolled back, in C or
 *       P, by anyone (at each XA ROLLBACK);
 *   (4) the marker rule, per database: an XA COMMIT answered XAER_NOTA (not listed) is
 *       settled by the marker in the branch's own database, then that database's job
 *       state: "committed" only for a committed branch, "lost" only for a rolled-back one;
 *   (5) -DLOST_C, once A struck: the decision stands for P (its branch committed, its J
 *       committed), C's J ended `abandoned` by the operator (never aborted: a stream's
 *       batch would be put back and its replay write P's committed rows again).
 *
 * Switches: -DLOSER; -DTWO_RC (a second concurrent RC); -DNO_RP (no concurrent RP). One of
 * these re-introduces a bug (model/README.md has their counterexamples):
 *   -DMUTANT_PARTICIPANT_EARLY   the driver commits P's branch before the decision;
 *   -DMUTANT_PARTICIPANT_ALONE   P's own recovery aborts a silent running J although it has
 *                                a coordinator link, and rolls back its branch;
 *   -DMUTANT_ABORT_P_FIRST_AFTER_DECISION  a failure after step 4 aborts P first, then
 *                                tries C (which is decided);
 *   -DMUTANT_STALE_WINNERS       RC takes P's winners from its scan of the pending links,
 *                                read before C's state;
 *   -DMUTANT_NO_FENCE            RC, finding no row of J in P for an aborted J, takes P as
 *                                final and marks the link done;
 *   -DMUTANT_LINKS_ONLY          the final recovery reaches P only through pending links;
 *   -DMUTANT_ROW_BEFORE_LINK     step 3b writes P's job row before its coordinator link;
 *   -DMUTANT_MARKER_ACROSS       a branch's XAER_NOTA settled by the coordinator's job state;
 *   -DMUTANT_UNCONDITIONAL_LINK  step 3a without its condition: this one verifies (no
 *                                counterexample, see model/README.md);
 *   -DMUTANT_PRUNE_FENCE         (-DPRUNE) P's retention deletes the fence too;
 *   -DMUTANT_WITHDRAW_UNFENCED   a failed first write into P marks the link done without
 *                                fencing or aborting P's row;
 *   -DMUTANT_LINKED_ABORT        (-DLOST_C) the operator's --linked end aborts a staged J in
 *                                C (the end before this fix).
 * model/check.sh lists the configurations that `make model` verifies.
 */

#define DC 0                      /* the coordinator's database */
#define DP 1                      /* the participant's database */

/* branches: b = 2*database + attempt; attempt 0 wins (symmetry), attempt 1 loses */
#define WC 0                      /* C's winning branch */
#define WP 2                      /* P's winning branch */
#define LP 3                      /* -DLOSER: a losing attempt in P */
#define NBR 4
#define DB(b) ((b) >> 1)
#define WINNER(b) (((b) & 1) == 0)
#define MASK(d) (3 << (2 * (d)))  /* the branches of database d */
#define WB(d) (1 << (2 * (d)))    /* its winner */

#define B_NONE   0
#define B_PREP   2
#define B_COMMIT 3
#define B_RB     4

#define J_NONE       0
#define J_RUNNING    1
#define J_COMMITTING 2
#define J_COMMITTED  3
#define J_ABORTED    4
#define J_ABANDONED  5            /* -DLOST_C: ended by an operator, the decision standing */

#define L_NONE    0               /* C's link row (J, P) */
#define L_PENDING 1
#define L_DONE    2

/* one XA COMMIT and its settling (BranchOps.commit) */
#define O_NONE      0             /* issue XA COMMIT */
#define O_GONE      1             /* XAER_NOTA, not listed: read the marker */
#define O_NOMARK    2             /* no marker: read the job state */
#define O_COMMITTED 3
#define O_ALREADY   4
#define O_LOST      5

byte job[2];                      /* each database's xasink_jobs row of J (J_NONE: none) */
byte br[NBR];
byte mk;                          /* marker rows, bit b: visible once b committed, until
                                     its database's finish deletes them */
bit win[2];                       /* J's winners recorded in C (decision), in P (copy) */
byte link;                        /* C: xasink_links (J, P, participant) */
bit lwin;                         /* P's winners, recorded in that row with the decision */
bit plink;                        /* P: xasink_links (J, C, coordinator) */
bit decided;                      /* ghost: C's decision is recorded */
bit fence;                        /* P's row of J is RC's fence (resolved_by its name) */
bit final_phase;
bit lostc;                        /* -DLOST_C: A rolled back C's decided winner */

#define CRASH if :: !final_phase -> goto dead :: skip fi

/* XA RECOVER in database d, this job's branches */
inline listing(d, l) {
  d_step {
    l = 0;
    if :: br[2 * d] == B_PREP -> l = l | (1 << (2 * d)) :: else fi;
    if :: br[2 * d + 1] == B_PREP -> l = l | (2 << (2 * d)) :: else fi
  }
}

/* BranchOps.rollback(b): one XA ROLLBACK (NOTA: gone already) */
inline rollback_branch(b) {
  if
  :: br[b] == B_PREP ->
       assert(!(WINNER(b) && decided));      /* (3) a recorded winner is never rolled back */
       br[b] = B_RB
  :: else
  fi
}

#define LOWEST(m) (((m) & 1) -> 0 : (((m) & 2) -> 1 : (((m) & 4) -> 2 : 3)))

/* roll back every branch of mask m (consumed), one XA ROLLBACK each */
#define ROLLBACK_ALL(m) \
  do \
  :: m == 0 -> break \
  :: else -> CRASH; atomic { k = LOWEST(m); m = m & ~(1 << k); rollback_branch(k); k = 0 } \
  od

#ifndef MUTANT_MARKER_ACROSS
#define SETTLED_BY(b) DB(b)               /* the branch's own database's job row */
#else
#define SETTLED_BY(b) DC                  /* the coordinator's */
#endif

/* BranchOps.commit(b): XA COMMIT; XAER_NOTA and not listed -> the marker in b's own
   database, then that database's job state (out: O_NONE or O_GONE on entry) */
inline commit_branch(b) {
  do
  :: out == O_NONE ->
       atomic {
         if
         :: br[b] == B_PREP ->
              assert(decided && WINNER(b));  /* (2) decision first; only winners */
              br[b] = B_COMMIT; mk = mk | (1 << (b)); out = O_COMMITTED
         :: else -> out = O_GONE             /* XAER_NOTA; XA RECOVER: not listed */
         fi
       }
  :: out == O_GONE ->
       CRASH;
       atomic { if :: mk & (1 << (b)) -> out = O_ALREADY :: else -> out = O_NOMARK fi }
  :: out == O_NOMARK ->
       CRASH;
       atomic {
         if :: job[SETTLED_BY(b)] == J_COMMITTED -> out = O_ALREADY :: else -> out = O_LOST fi
       }
  :: out >= O_COMMITTED -> break
  od;
  assert(out != O_ALREADY || br[b] == B_COMMIT);  /* (4) the marker rule, per database */
  assert(out != O_LOST || br[b] == B_RB)
}

/* Journal.finish in database d: COMMITTING -> COMMITTED, the markers' DELETE */
inline finish(d) {
  atomic {
    if
    :: job[d] == J_COMMITTING ->
         assert(br[2 * d] == B_COMMIT);
         job[d] = J_COMMITTED; mk = mk & ~MASK(d)
    :: else
    fi
  }
}

/* Whether recovery in database d may abort a silent running J: a participant's job with
   its coordinator link, never. */
#ifndef MUTANT_PARTICIPANT_ALONE
#define MAY_ABORT(d) ((d) == DC || !plink)
#else
#define MAY_ABORT(d) 1
#endif

/* _Resolver.resolve of J in database d: the row, a fresh listing; a running J left (alive,
   or a participant's), or aborted conditionally if silent and the row read again (up to 3
   looks); an aborted J's branches rolled back; a decided J rolled forward (listed
   non-winners rolled back, the listed winner committed, an unlisted one settled by its
   marker) and finished; branches without a row (`without_row`) left while they may be
   younger than the grace (a row read before the branch's job wrote it), rolled back once
   everything has stopped. */
inline resolve(d) {
  looks = 0;
  do
  :: atomic { rst = job[d]; ab = MAY_ABORT(d); wm = (win[d] -> WB(d) : 0) };  /* row, winners */
     CRASH;
     listing(d, lst);
     CRASH;
     if
     :: rst == J_RUNNING && ab && looks < 2 ->
          if
          :: atomic { if :: job[d] == J_RUNNING -> job[d] = J_ABORTED :: else fi };
             CRASH; looks++                  /* Journal.abort(beats=...), then look again */
          :: !final_phase -> break           /* alive: left */
          fi
     :: else -> break
     fi
  od;
  if
  :: rst == J_ABORTED -> ROLLBACK_ALL(lst)
  :: rst == J_COMMITTING || rst == J_COMMITTED || rst == J_ABANDONED ->
       d_step { l0 = lst & ~wm; out = O_GONE; if :: lst & wm -> out = O_NONE :: else fi };
       ROLLBACK_ALL(l0);
       if
       :: wm && (rst == J_COMMITTING || out == O_NONE) ->
            CRASH;
            commit_branch(2 * d);
            if
            :: rst == J_COMMITTING && out != O_LOST -> CRASH; finish(d)
            :: else
            fi
       :: else
       fi
  :: rst == J_NONE && lst != 0 && final_phase ->  /* no row (a pruned abort's straggler): */
       ROLLBACK_ALL(lst)                      /* presumed abort once past the grace */
  :: else                                     /* running: left; no row, nothing listed */
  fi;
  atomic { looks = 0; lst = 0; l0 = 0; out = 0; ab = 0; wm = 0 }
}

/* ------------------------------------------------------------------------------------- */
/* The driver: the transaction's block and its end (spark/transaction.py with
   driver/participants.py). FAIL: the block raises (or a write fails) before the decision. */
#define FAIL if :: !final_phase -> goto dead :: goto abort_path :: skip fi
/* BEGIN_FAIL: the participant's first write fails once its links exist, before it is a
   member (enlist's Job.begin raises): enlist withdraws it, then the block raises. */
#define BEGIN_FAIL if :: !final_phase -> goto dead :: goto withdraw :: skip fi

proctype D() {
  byte st, lst, k, out;
  bit joined;

  FAIL;                                       /* (step 1, J running in C, is in init) */
  br[WC] = B_PREP;                            /* step 2: C's branch prepares */
  FAIL;
  atomic {                                    /* step 3a: links.add_participant */
#ifndef MUTANT_UNCONDITIONAL_LINK
    if :: job[DC] == J_RUNNING -> link = L_PENDING; st = 1 :: else -> st = 0 fi
#else
    link = L_PENDING; st = 1
#endif
  };
  if :: !st -> goto abort_path :: else fi;    /* JobAbortedError */
  FAIL;
#ifndef MUTANT_ROW_BEFORE_LINK
  plink = 1;                                  /* step 3b: links.add_coordinator */
  BEGIN_FAIL;                                 /* Job.begin's recovery scan in P raises */
#endif
  atomic {                                    /* step 3b: P's job row (Job.begin) */
    if :: job[DP] == J_NONE -> job[DP] = J_RUNNING; st = 1 :: else -> st = 0 fi
  };
  if :: !st -> goto abort_path :: else fi;    /* duplicate key: a recovery fenced P */
  BEGIN_FAIL;                                 /* Job.begin raises after P's row */
  joined = 1;                                 /* a member: abort_all aborts it */
  FAIL;
#ifdef MUTANT_ROW_BEFORE_LINK
  plink = 1;                                  /* the coordinator link after the row */
  FAIL;
#endif
  br[WP] = B_PREP;                            /* step 3c: P's branch prepares */
  FAIL;
#ifdef MUTANT_PARTICIPANT_EARLY
  atomic { if :: job[DP] == J_RUNNING -> job[DP] = J_COMMITTING; win[DP] = 1 :: else fi };
  out = O_NONE;
  commit_branch(WP);                          /* P committed before the decision */
  FAIL;
#endif
  atomic {                                    /* step 4: Journal.decide_commit + record_winners */
    if
    :: job[DC] == J_RUNNING ->
         job[DC] = J_COMMITTING; win[DC] = 1; lwin = 1; decided = 1; st = 1
    :: else -> st = 0
    fi
  };
  if :: !st -> goto abort_path :: else fi;    /* JobAbortedError */
#ifdef MUTANT_ABORT_P_FIRST_AFTER_DECISION
  if :: goto abort_path :: skip fi;           /* a failure after the decision */
#endif
  CRASH;                                      /* from here a failure aborts nothing */
  atomic {                                    /* step 5: copy_decisions */
    if
    :: job[DP] == J_RUNNING -> job[DP] = J_COMMITTING; win[DP] = lwin; st = 1
    :: job[DP] == J_COMMITTING || job[DP] == J_COMMITTED -> st = 1
    :: else -> st = 0
    fi
  };
  if :: !st -> goto dead :: else fi;          /* CommitError: recovery from C finishes */
  CRASH;                                      /* step 6 in C: Job.commit */
  out = O_NONE;
  commit_branch(WC);
  if :: out == O_LOST -> goto dead :: else fi;  /* LostBranchError, before the finish */
  CRASH;
  listing(DC, lst);
  lst = lst & ~WB(DC);
  ROLLBACK_ALL(lst);
  CRASH;
  finish(DC);
  CRASH;                                      /* step 6 in P: commit_all -> Job.commit */
  out = O_NONE;
  commit_branch(WP);
  CRASH;
  listing(DP, lst);
  lst = lst & ~WB(DP);
  ROLLBACK_ALL(lst);
  CRASH;
  finish(DP);
  CRASH;
  link = L_DONE;                              /* step 7: links.mark_done */
  goto dead;

withdraw:                                     /* enlist's _withdraw: not yet a member */
#ifndef MUTANT_WITHDRAW_UNFENCED
  CRASH;
  atomic {                                    /* P's row INSERTed aborted (the fence), */
    if :: job[DP] == J_NONE -> job[DP] = J_ABORTED; fence = 1 :: else fi;
    st = job[DP]                              /* else its state read (duplicate key) */
  };
  CRASH;
  if
  :: st == J_RUNNING ->                       /* the row begin wrote: Journal.abort */
       atomic { if :: job[DP] == J_RUNNING -> job[DP] = J_ABORTED :: else fi };
       CRASH;
       st = job[DP]
  :: else
  fi;
  if :: st != J_ABORTED -> goto abort_path :: else fi;
#endif
  CRASH;
  link = L_DONE;                              /* links.mark_done; then abort_all for C */

abort_path:                                   /* abort_all: C's job first */
#ifdef MUTANT_ABORT_P_FIRST_AFTER_DECISION
  if
  :: joined ->
       CRASH;
       atomic { if :: job[DP] == J_RUNNING -> job[DP] = J_ABORTED :: else fi };
       CRASH;
       listing(DP, lst);
       ROLLBACK_ALL(lst)
  :: else
  fi;
#endif
  CRASH;
  atomic { if :: job[DC] == J_RUNNING -> job[DC] = J_ABORTED :: else fi };  /* Job.abort */
  CRASH;
  st = job[DC];                               /* the state read */
  if :: st != J_ABORTED -> goto dead :: else fi;
  CRASH;
  listing(DC, lst);
  ROLLBACK_ALL(lst);
  if
  :: joined ->                                /* then every participant's */
       CRASH;
       atomic { if :: job[DP] == J_RUNNING -> job[DP] = J_ABORTED :: else fi };
       CRASH;
       st = job[DP];
       if :: st != J_ABORTED -> goto dead :: else fi;
       CRASH;
       listing(DP, lst);
       ROLLBACK_ALL(lst);
       CRASH;
       link = L_DONE                          /* links.mark_done */
  :: else
  fi;
dead:
  atomic { st = 0; lst = 0; k = 0; out = 0; joined = 0 }
}

/* ------------------------------------------------------------------------------------- */
/* Recovery from C with P (xasink recover --url C --participant P): C's own resolution
   (resolve_in_doubt), then participants.finish for the pending link. */
proctype RC() {
  byte rst, lst, l0, k, out, looks, cst, pst, wm;
  bit ab, lw, fin;

  resolve(DC);
  CRASH;
  atomic { if :: link != L_PENDING -> goto dead :: else -> lw = lwin fi };  /* links.participants */
  CRASH;
  cst = job[DC];                              /* coordinator.state */
  if :: cst == J_RUNNING || cst == J_NONE -> goto dead :: else fi;  /* left */
  CRASH;
#ifndef MUTANT_STALE_WINNERS
  lw = lwin;                                  /* the link's winners, read after the state */
  CRASH;
#endif
  pst = job[DP];                              /* _finish_one: P's state */
  CRASH;
  if
  :: cst == J_ABORTED ->
       if
       :: pst == J_RUNNING ->
            atomic { if :: job[DP] == J_RUNNING -> job[DP] = J_ABORTED :: else fi };
            CRASH
#ifndef MUTANT_NO_FENCE
       :: pst == J_NONE ->                    /* the fence: P's row INSERTed aborted */
            atomic {
              if :: job[DP] == J_NONE -> job[DP] = J_ABORTED; fence = 1 :: else -> goto dead fi
            };
            CRASH                              /* duplicate key: a later run */
#endif
       :: else
       fi
  :: else ->                                  /* committing, committed or abandoned */
       if
       :: pst == J_RUNNING ->                 /* copy_decision */
            atomic {
              if :: job[DP] == J_RUNNING -> job[DP] = J_COMMITTING; win[DP] = lw :: else fi
            };
            CRASH
       :: else
       fi
  fi;
  resolve(DP);                                /* resolve_in_doubt(job=J) in P */
  CRASH;
  atomic {                                    /* P's state: final? */
    fin = (job[DP] == J_NONE || job[DP] == J_COMMITTED || job[DP] == J_ABORTED)
  };
  CRASH;
  if :: fin -> link = L_DONE :: else fi;      /* links.mark_done */
dead:
  atomic { rst = 0; lst = 0; l0 = 0; k = 0; out = 0; looks = 0; cst = 0; pst = 0; wm = 0;
           ab = 0; lw = 0; fin = 0 }
}

/* Recovery of P alone (xasink recover --url P, or a write's startup recovery in P). */
proctype RP() {
  byte rst, lst, l0, k, out, looks, wm;
  bit ab;
  resolve(DP);
dead:
  atomic { rst = 0; lst = 0; l0 = 0; k = 0; out = 0; looks = 0; ab = 0; wm = 0 }
}

#ifdef PRUNE
/* P's retention (`retention.sweep`), or `xasink prune` there: one DELETE of an aborted row
   with P's link rows of J, never the fence. */
proctype PR() {
  atomic {
#ifndef MUTANT_PRUNE_FENCE
    if :: job[DP] == J_ABORTED && !fence -> job[DP] = J_NONE; plink = 0 :: else fi
#else
    if :: job[DP] == J_ABORTED -> job[DP] = J_NONE; plink = 0; fence = 0 :: else fi
#endif
  }
}
#endif

#ifdef LOSER
/* The losing attempt of P's partition: it runs once P's job row exists, and its branch
   prepares at any time after (a zombie); never a winner. */
proctype L() {
  if
  :: job[DP] != J_NONE
  :: goto dead
  fi;
  CRASH;
  br[LP] = B_PREP;
dead:
  skip
}
#endif

#ifdef LOST_C
/* An administrator's XA ROLLBACK of C's decided winner, behind xasink's back. */
proctype A() {
  atomic { if :: br[WC] == B_PREP && decided -> br[WC] = B_RB; lostc = 1 :: else fi }
}

#ifndef MUTANT_LINKED_ABORT
#define LINKED_END J_ABANDONED
#else
#define LINKED_END J_ABORTED
#endif

/* `xasink resolve J --abandon --linked` against C (admin.abandon): the job decided, linked,
   a winner of it lost here (`listing.lost_winners`: not listed, no marker); then its end,
   conditional on the state read (`Journal.end_by_operator`); then C's resolution. */
proctype O() {
  byte rst, lst, l0, k, out, looks, wm;
  bit ab;
  atomic {
    if :: job[DC] == J_COMMITTING && br[WC] == B_RB && !(mk & WB(DC)) -> skip
    :: else -> goto dead
    fi
  };
  CRASH;
  atomic { if :: job[DC] == J_COMMITTING -> job[DC] = LINKED_END :: else -> goto dead fi };
  CRASH;
  resolve(DC);
dead:
  atomic { rst = 0; lst = 0; l0 = 0; k = 0; out = 0; looks = 0; ab = 0; wm = 0 }
}
#endif

init {
  atomic {
    job[DC] = J_RUNNING;                      /* step 1: begin_job */
    run D(); run RC();
#ifndef NO_RP
    run RP();
#endif
#ifdef TWO_RC
    run RC();
#endif
#ifdef LOSER
    run L();
#endif
#ifdef PRUNE
    run PR();
#endif
#ifdef LOST_C
    run A(); run O();
#endif
  }
  _nr_pr == 1;                                /* everything has stopped */
  final_phase = 1;
#ifdef LOST_C
  run O();                                    /* the operator ends what recovery reports */
  _nr_pr == 1;
#endif
  run RC();                                   /* the final recovery from C with P */
  _nr_pr == 1;
#ifndef MUTANT_LINKS_ONLY
  run RP();                                   /* and P's own resolution */
  _nr_pr == 1;
#endif
  d_step {
    /* (5) a winner lost in C: the decision stands for P, C's J ended by the operator */
    assert(!lostc || (br[WP] == B_COMMIT && job[DP] == J_COMMITTED && job[DC] == J_ABANDONED));
    /* (1) all or nothing */
    assert(lostc || (br[WC] == B_COMMIT) == (br[WP] == B_COMMIT));
    assert((br[WP] == B_COMMIT) == decided);
    assert(br[LP] != B_COMMIT);
    /* nothing left in doubt; both rows final; the link not pending */
    assert(br[WC] != B_PREP && br[WP] != B_PREP && br[LP] != B_PREP);
    assert(job[DC] == J_COMMITTED || job[DC] == J_ABORTED || job[DC] == J_ABANDONED);
    assert(job[DP] == J_COMMITTED || job[DP] == J_ABORTED || job[DP] == J_NONE);
    assert(lostc || (job[DC] == J_COMMITTED) == (job[DP] == J_COMMITTED));
    assert(link != L_PENDING);
    assert(mk == 0)
  }
}
