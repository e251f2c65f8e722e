// The inbox's live updates: one EventSource on /console/events; on each draft change the
// rows are fetched again (htmx swaps them in, with the filters and sort now selected).
// Nothing from the event is written into the page: it only says "something changed".

const form = document.getElementById("inbox-filters");
const live = document.getElementById("inbox-live");
const rows = () => document.getElementById("inbox-rows");

function refresh() {
  const query = form ? new URLSearchParams(new FormData(form)).toString() : "";
  return window.htmx.ajax("GET", "/console/inbox/rows?" + query, {
    target: "#inbox-rows",
    swap: "outerHTML",
    // Not the person's doing: a live refresh does not keep an unattended session alive.
    headers: { "X-Console-Refresh": "1" },
  });
}

function say(text) {
  if (live) live.textContent = text;
}

if (rows()) {
  const events = new EventSource("/console/events");
  let pending = null;
  events.addEventListener("open", () => say("Live: new drafts appear here as they come."));
  events.addEventListener("draft", (message) => {
    let change = {};
    try {
      change = JSON.parse(message.data);
    } catch {
      return;
    }
    // Several changes in one poll cost one refresh.
    if (pending === null) {
      pending = Promise.resolve()
        .then(refresh)
        .finally(() => {
          pending = null;
          document.body.dataset.lastChange = `${change.type}:${change.draft_id}`;
        });
    }
  });
  events.addEventListener("session", () => {
    events.close();
    say("Your session has ended; sign in again to keep the inbox live.");
  });
  events.addEventListener("error", () => {
    if (events.readyState === EventSource.CLOSED) say("Live updates stopped; reload the page.");
  });
}
