-- Ids made in SQL sort in the order they were made, as the TypeScript client's do.
--
-- A concurrency key's jobs start in id order (README "Concurrency keys"). jobs.enqueue and the job
-- table's default take their ids from jobs.uuid_v7(), which set only the millisecond and left the
-- rest random: two jobs an ERP enqueued through SQL within one millisecond (a loop in its
-- transaction) sorted at random, and a key could start the second before the first. The twelve
-- bits after the millisecond (rand_a, RFC 9562) now hold the microsecond within it (the RFC's
-- method 3, as PostgreSQL 18's uuidv7() does), and within a transaction each id is above the one
-- before even in the same microsecond or when the clock steps back (the last one is kept in a
-- transaction-local setting, gone at COMMIT or ROLLBACK). Ids already made keep their values.
CREATE OR REPLACE FUNCTION jobs.uuid_v7() RETURNS uuid LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  us   bigint := floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
  prev bigint := nullif(current_setting('jobs.uuid_v7_us', true), '')::bigint;
BEGIN
  IF us <= prev THEN
    us := prev + 1;
  END IF;
  PERFORM set_config('jobs.uuid_v7_us', us::text, true);
  -- Bytes 1-6 the millisecond, 7-8 the version (7) and the microsecond scaled to 12 bits; the
  -- rest, with the variant bits, from gen_random_uuid().
  RETURN encode(
    overlay(uuid_send(gen_random_uuid())
      PLACING substring(int8send(us / 1000) FROM 3) || int2send((28672 | ((us % 1000) * 4096 / 1000))::int2)
      FROM 1 FOR 8),
    'hex')::uuid;
END $$;
