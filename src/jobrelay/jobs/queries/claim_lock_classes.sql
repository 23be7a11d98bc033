-- Before claiming jobs of classes with a global cap: one advisory transaction lock per
-- capped class (in a fixed order), so claimers of a capped class take turns and the next
-- statement's snapshot (claim_jobs) sees every slot an earlier claimer took. Released at
-- commit. Classes without a cap never take it.
SELECT count(pg_advisory_xact_lock(hashtextextended('jobrelay.class_slot.' || locked.cls, 0)))
FROM (
    SELECT cls
    FROM unnest(%(classes)s::text[]) AS c (cls)
    ORDER BY cls
    OFFSET 0
) AS locked
