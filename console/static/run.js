// Poll the run's progress JSON while the page is open and the run has not ended.
(function () {
  const box = document.getElementById("progress");
  if (!box) return;
  const run = box.dataset.run;
  async function poll() {
    const reply = await fetch("/api/runs/" + encodeURIComponent(run), { credentials: "same-origin" });
    if (!reply.ok) return;
    const data = await reply.json();
    document.getElementById("tickets-run").textContent = data.tickets_run;
    document.getElementById("device-seconds").textContent = Math.round(data.device_seconds);
    document.getElementById("current").textContent = data.current || "—";
    document.getElementById("run-status").textContent = data.ended ? "ended: " + data.stop_reason : "running or paused";
    const training = document.getElementById("training");
    const rows = data.training.map((t) => {
      const li = document.createElement("li");
      const loss = t.train_loss === null ? "" : ", train loss " + t.train_loss.toFixed(4);
      li.textContent = t.ticket_id + " epoch " + (t.epoch === null ? "—" : t.epoch) + "/" + t.epochs + loss + "; " +
        Math.round(t.device_seconds_spent || 0) + " device-s spent, " + Math.round(t.device_seconds_left || 0) + " left";
      return li;
    });
    if (!rows.length) {
      const none = document.createElement("li");
      none.className = "muted";
      none.textContent = "nothing";
      rows.push(none);
    }
    training.replaceChildren(...rows);
    const list = document.getElementById("approved-tickets");
    list.replaceChildren(...data.approved_data_tickets.map((t) => {
      const li = document.createElement("li");
      li.textContent = t.id + " — " + (t.taken ? "taken into the run's queue" : "waiting for the run's next propose step");
      return li;
    }));
    if (!data.ended) setTimeout(poll, 2000);
  }
  setTimeout(poll, 2000);
})();
