-- Keys are text a person reads (issue 16's newcomer trial, session 14's note): in logs, alarms,
-- `jobs show` and the live view. jobs.enqueue now holds them to the rules the TypeScript paths
-- apply (runtime/domain/keys.ts), in the same words:
--  - an idempotency key or a concurrency key has no control character (C0, DEL, C1: an escape
--    sequence or a line break would be written as it is into an on-call engineer's terminal);
--  - a key made from the type's template takes each payload field's text as TypeScript does: a
--    number in plain decimal with trailing zeros trimmed (1.0 and 1 are one key, as they are for a
--    JavaScript caller; before, jsonb kept 1.0 and the two paths made different keys), an object
--    or a list refused (before, its JSON text became part of the key), a control character
--    refused, and a key over 200 characters refused naming the payload (before, the job table's
--    CHECK failed with a bare constraint error).
-- Only the function changes; rows already written keep their keys.

-- Why `k` cannot be a key, or null: the words of keyProblem in runtime/domain/keys.ts.
CREATE FUNCTION jobs.control_character_problem(k text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT format('must not contain control characters (U+%s at character %s)',
                lpad(upper(to_hex(ascii(c))), 4, '0'), strpos(k, c))
    FROM substring(k FROM '[\u0001-\u001f\u007f-\u009f]') AS c
   WHERE c IS NOT NULL
$$;

CREATE FUNCTION jobs.key_problem(k text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN length(k) NOT BETWEEN 1 AND 200 THEN 'must be a string of 1 to 200 characters'
              ELSE jobs.control_character_problem(k) END
$$;

-- A payload field's value as the text of a key: keyText in runtime/domain/keys.ts.
CREATE FUNCTION jobs.key_text(v jsonb) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE jsonb_typeof(v) WHEN 'number' THEN trim_scale(v::numeric)::text ELSE v #>> '{}' END
$$;

CREATE OR REPLACE FUNCTION jobs.enqueue(
  type              text,
  payload           jsonb DEFAULT '{}',
  idempotency_key   text DEFAULT NULL,
  run_at            timestamptz DEFAULT NULL,
  max_attempts      integer DEFAULT NULL,
  concurrency_key   text DEFAULT NULL,
  concurrency_limit integer DEFAULT NULL,
  lane              text DEFAULT NULL,
  OUT job_id uuid,
  OUT duplicate boolean
) LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
  t jobs.job_type;
  p jsonb := coalesce(payload, '{}');
  k text := concurrency_key;
  missing text;
  f text;
  ln text;
  kd float8;
  keep float8;
  new_id uuid;
  key_job uuid;
  key_found boolean;
  key_expired boolean;
BEGIN
  SELECT * INTO t FROM jobs.job_type jt WHERE jt.type = enqueue.type;
  IF NOT FOUND THEN
    PERFORM jobs.enqueue_refuse('type', format('unknown job type %s; known types: %s', coalesce(quote_literal(enqueue.type), 'null'),
      coalesce((SELECT string_agg(jt.type, ', ' ORDER BY jt.type) FROM jobs.job_type jt), 'none registered yet (start the API or a worker once)')));
  END IF;
  IF jsonb_typeof(p) <> 'object' THEN
    PERFORM jobs.enqueue_refuse('payload', format('must be a JSON object (got %s)', jsonb_typeof(p)));
  END IF;
  IF octet_length(p::text) > 262144 THEN
    PERFORM jobs.enqueue_refuse('payload', format('is %s bytes; the limit is 262144 bytes (store large inputs in a table and pass their id)', octet_length(p::text)));
  END IF;
  IF idempotency_key IS NOT NULL AND jobs.key_problem(idempotency_key) IS NOT NULL THEN
    PERFORM jobs.enqueue_refuse('idempotency_key', jobs.key_problem(idempotency_key));
  END IF;
  IF max_attempts IS NOT NULL AND max_attempts NOT BETWEEN 1 AND 100 THEN
    PERFORM jobs.enqueue_refuse('max_attempts', format('must be a whole number from 1 to 100 (got %s)', max_attempts));
  END IF;
  IF run_at IS NOT NULL AND (run_at < '1970-01-01' OR run_at >= '10000-01-01') THEN
    PERFORM jobs.enqueue_refuse('run_at', 'must be a real date between 1970 and 9999');
  END IF;
  IF k IS NOT NULL AND jobs.key_problem(k) IS NOT NULL THEN
    PERFORM jobs.enqueue_refuse('concurrency_key', jobs.key_problem(k));
  END IF;
  IF concurrency_limit IS NOT NULL AND concurrency_limit NOT BETWEEN 1 AND 1000 THEN
    PERFORM jobs.enqueue_refuse('concurrency_limit', format('must be a whole number from 1 to 1000 (got %s)', concurrency_limit));
  END IF;
  -- The type's default key, from its template: each {field} is the payload's field as text.
  IF k IS NULL AND t.concurrency_key_template IS NOT NULL THEN
    SELECT string_agg(m[1], ', ') INTO missing
      FROM regexp_matches(t.concurrency_key_template, '\{([A-Za-z0-9_]+)\}', 'g') AS m
     WHERE p->>m[1] IS NULL;
    IF missing IS NOT NULL THEN
      PERFORM jobs.enqueue_refuse('payload', format('has no %s, which job type %s keys its jobs on (%s); give it, or a concurrency_key',
        missing, t.type, t.concurrency_key_template));
    END IF;
    FOR f IN SELECT DISTINCT m[1] FROM regexp_matches(t.concurrency_key_template, '\{([A-Za-z0-9_]+)\}', 'g') AS m LOOP
      IF jsonb_typeof(p->f) IN ('object', 'array') THEN
        PERFORM jobs.enqueue_refuse('payload', format('%s is %s, and job type %s keys its jobs on it (%s): it must be a string, number or boolean',
          f, CASE jsonb_typeof(p->f) WHEN 'array' THEN 'a list' ELSE 'an object' END, t.type, t.concurrency_key_template));
      END IF;
      IF jobs.control_character_problem(jobs.key_text(p->f)) IS NOT NULL THEN
        PERFORM jobs.enqueue_refuse('payload', format('%s %s, and job type %s keys its jobs on it (%s)',
          f, jobs.control_character_problem(jobs.key_text(p->f)), t.type, t.concurrency_key_template));
      END IF;
    END LOOP;
    -- One pass over the template, as TypeScript's replace: a field's text that looks like a
    -- placeholder ('{b}') stays as it is instead of being filled in by a later field.
    SELECT string_agg(CASE WHEN r.m[1] ~ '^\{[A-Za-z0-9_]+\}$' THEN jobs.key_text(p -> substr(r.m[1], 2, length(r.m[1]) - 2)) ELSE r.m[1] END,
                      '' ORDER BY r.n)
      INTO k
      FROM regexp_matches(t.concurrency_key_template, '(\{[A-Za-z0-9_]+\}|[^{]+|\{)', 'g') WITH ORDINALITY AS r(m, n);
    IF length(k) > 200 THEN
      PERFORM jobs.enqueue_refuse('payload', format('makes the key of job type %s (%s) %s characters long; the limit is 200: give a concurrency_key',
        t.type, t.concurrency_key_template, length(k)));
    END IF;
  ELSIF k IS NULL AND t.key_from_code THEN
    PERFORM jobs.enqueue_refuse('concurrency_key', format('is required: job type %s derives its key from the payload in its TypeScript definition, which the database cannot run', t.type));
  END IF;
  ln := coalesce(lane, t.default_lane);
  IF ln NOT IN ('urgent', 'bulk') THEN
    PERFORM jobs.enqueue_refuse('lane', format('must be urgent or bulk (got %s)', quote_literal(ln)));
  END IF;
  IF concurrency_limit IS NOT NULL AND k IS NULL THEN
    PERFORM jobs.enqueue_refuse('concurrency_limit', format('limits the jobs of a concurrency_key: give one too (job type %s has no default key)', t.type));
  END IF;

  -- As the TypeScript client's jobInsertMany (runtime/store/sql.ts) and its rare path
  -- (runtime/store/idempotency.ts): for a type that keeps its keys, the key row first (its primary
  -- key decides between concurrent enqueues) and an existing key returns its job while its window
  -- lasts; then the job, its outbox row, or the active job holding the key. A key freed between
  -- two statements (its job ended, its window passed) is tried again.
  kd := CASE WHEN idempotency_key IS NOT NULL THEN t.key_keep_days END;
  keep := greatest(t.keep_finished_days, coalesce(kd, 0));
  FOR tries IN 1..5 LOOP
    new_id := jobs.uuid_v7();
    IF kd IS NOT NULL THEN
      INSERT INTO jobs.idempotency_key (type, key, job_id, keep_days)
      VALUES (t.type, idempotency_key, new_id, CASE WHEN kd = 'Infinity' THEN NULL ELSE kd::int END)
      ON CONFLICT (type, key) DO NOTHING
      RETURNING job_id INTO key_job;
      IF key_job IS NULL THEN
        SELECT k2.job_id, j.id IS NOT NULL,
               coalesce(k2.keep_days IS NOT NULL AND j.finished_at + k2.keep_days * interval '1 day' < statement_timestamp(), false)
          INTO key_job, key_found, key_expired
          FROM jobs.idempotency_key k2 LEFT JOIN jobs.job j ON j.id = k2.job_id
         WHERE k2.type = t.type AND k2.key = enqueue.idempotency_key;
        IF key_found AND NOT key_expired THEN
          job_id := key_job;
          duplicate := true;
          RETURN;
        END IF;
        -- Its window passed, or it names no job: the key is free; take it on the next try.
        DELETE FROM jobs.idempotency_key k2 WHERE k2.type = t.type AND k2.key = enqueue.idempotency_key AND k2.job_id = key_job;
        CONTINUE;
      END IF;
    END IF;
    INSERT INTO jobs.job (id, type, payload, idempotency_key, max_attempts, run_after, concurrency_key, concurrency_limit, lane,
                          keep_days, prune_after)
    VALUES (new_id, t.type, p, idempotency_key, coalesce(max_attempts, t.default_max_attempts),
            coalesce(run_at, statement_timestamp()), k, CASE WHEN k IS NOT NULL THEN coalesce(concurrency_limit, t.concurrency_limit, 1) END,
            ln, CASE WHEN keep = 'Infinity' THEN NULL ELSE keep::int END,
            CASE WHEN keep = 'Infinity' THEN 'infinity'::timestamptz ELSE statement_timestamp() + keep * interval '1 day' END)
    ON CONFLICT (type, idempotency_key) WHERE idempotency_key IS NOT NULL AND finished_at IS NULL DO NOTHING
    RETURNING id INTO job_id;
    IF job_id IS NOT NULL THEN
      INSERT INTO jobs.outbox (job_id) VALUES (job_id);
      duplicate := false;
      RETURN;
    END IF;
    SELECT j.id INTO job_id FROM jobs.job j
     WHERE j.type = t.type AND j.idempotency_key = enqueue.idempotency_key AND j.finished_at IS NULL;
    IF job_id IS NOT NULL THEN
      -- An active job from before its type kept keys: the key row just written names it.
      IF kd IS NOT NULL THEN
        UPDATE jobs.idempotency_key k2 SET job_id = enqueue.job_id
         WHERE k2.type = t.type AND k2.key = enqueue.idempotency_key AND k2.job_id = new_id;
      END IF;
      duplicate := true;
      RETURN;
    END IF;
    IF kd IS NOT NULL THEN
      DELETE FROM jobs.idempotency_key k2 WHERE k2.type = t.type AND k2.key = enqueue.idempotency_key AND k2.job_id = new_id;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'jobs.enqueue: idempotency key % of type % kept changing hands; try again', idempotency_key, t.type
    USING ERRCODE = '40001';
END $$;

