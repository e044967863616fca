#!/usr/bin/env bash
# Give the Pub/Sub subscription behind one Eventarc trigger a dead-letter topic and a bounded
# retry backoff. Run by Terraform (terraform_data.dead_letter in functions.tf) after the function
# and its trigger exist; the google provider has no field for either on an Eventarc trigger, and
# Eventarc documents updating its subscription for both (Eventarc: "Retry events").
#
# Environment: TRIGGER (projects/P/locations/L/triggers/NAME), DEAD_LETTER_TOPIC
# (projects/P/topics/T), MAX_DELIVERY_ATTEMPTS, MIN_RETRY_DELAY, MAX_RETRY_DELAY,
# PUBSUB_SERVICE_AGENT (the project's Pub/Sub service agent email).
set -euo pipefail

: "${TRIGGER:?}" "${DEAD_LETTER_TOPIC:?}" "${MAX_DELIVERY_ATTEMPTS:?}" "${MIN_RETRY_DELAY:?}" "${MAX_RETRY_DELAY:?}" "${PUBSUB_SERVICE_AGENT:?}"
command -v gcloud >/dev/null || { echo "eventarc-dead-letter: gcloud is needed (or set configure_dead_letter = false)" >&2; exit 1; }

IFS=/ read -r _ project _ location _ name <<<"$TRIGGER"
if [[ -z "${project:-}" || -z "${location:-}" || -z "${name:-}" ]]; then
  echo "eventarc-dead-letter: unexpected trigger name: $TRIGGER" >&2
  exit 1
fi

subscription=""
for attempt in 1 2 3 4 5; do  # a new trigger's transport can take a moment to appear
  subscription="$(gcloud eventarc triggers describe "$name" --project="$project" --location="$location" \
    --format='value(transport.pubsub.subscription)')"
  [[ -n "$subscription" ]] && break
  sleep $((attempt * 5))
done
[[ -n "$subscription" ]] || { echo "eventarc-dead-letter: trigger $TRIGGER has no Pub/Sub subscription" >&2; exit 1; }

gcloud pubsub subscriptions update "$subscription" --project="$project" \
  --dead-letter-topic="$DEAD_LETTER_TOPIC" \
  --max-delivery-attempts="$MAX_DELIVERY_ATTEMPTS" \
  --min-retry-delay="$MIN_RETRY_DELAY" \
  --max-retry-delay="$MAX_RETRY_DELAY" \
  --quiet >/dev/null

# Forwarding to the dead-letter topic acknowledges the message on this subscription, as the
# Pub/Sub service agent.
gcloud pubsub subscriptions add-iam-policy-binding "$subscription" --project="$project" \
  --member="serviceAccount:$PUBSUB_SERVICE_AGENT" --role=roles/pubsub.subscriber \
  --quiet >/dev/null

echo "eventarc-dead-letter: $subscription -> $DEAD_LETTER_TOPIC (max $MAX_DELIVERY_ATTEMPTS attempts, backoff $MIN_RETRY_DELAY..$MAX_RETRY_DELAY)"
