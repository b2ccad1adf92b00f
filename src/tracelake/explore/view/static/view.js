// tracelake view: a facet <select> submits its form at once; "expand all" opens every folded block.
document.addEventListener("DOMContentLoaded", () => {
  for (const select of document.querySelectorAll("select.autosubmit")) {
    select.addEventListener("change", () => select.form.submit());
  }
  for (const button of document.querySelectorAll("button.expand-all")) {
    button.addEventListener("click", () => {
      const blocks = document.querySelectorAll(".messages details");
      const open = button.textContent === "expand all";
      blocks.forEach((d) => { d.open = open; });
      button.textContent = open ? "collapse all" : "expand all";
    });
  }
});
