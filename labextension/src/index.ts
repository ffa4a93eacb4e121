// The lab entry point, a thin adapter: the Runs and Workers panels in the left sidebar, a
// command for each (and one to open a run's detail), the toast on load that counts runs in
// progress. Everything else lives in the modules it wires (panels, api, live, format, messages).

import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, Notification } from '@jupyterlab/apputils';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import { LabIcon } from '@jupyterlab/ui-components';

import { CodefyApi } from './api';
import { RunDetail } from './runDetail';
import { RunsPanel } from './runsPanel';
import { WorkersPanel } from './workersPanel';

export const PLUGIN_ID = 'codefy-jupyter:panels';
export const COMMANDS = {
  openRuns: 'codefy:open-runs',
  openWorkers: 'codefy:open-workers',
  openRun: 'codefy:open-run'
};

const runsIcon = new LabIcon({
  name: 'codefy-jupyter:runs',
  svgstr: '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
    '<path d="M3 5h2v2H3zm4 0h14v2H7zM3 11h2v2H3zm4 0h14v2H7zm-4 6h2v2H3zm4 0h14v2H7z"/></g></svg>'
});
const workersIcon = new LabIcon({
  name: 'codefy-jupyter:workers',
  svgstr: '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
    '<path d="M4 3h16v6H4zm2 2v2h2V5zM4 11h16v6H4zm2 2v2h2v-2zm3 6h6v2H9z"/></g></svg>'
});

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Runs and Workers panels of the codefy run queue',
  autoStart: true,
  optional: [ITranslator, ILayoutRestorer, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    translator: ITranslator | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ) => {
    const trans = (translator ?? nullTranslator).load('codefy_jupyter');
    const api = new CodefyApi(app.serviceManager.serverSettings);

    const openRun = (id: string): void => {
      const existing = Array.from(app.shell.widgets('main')).find(w => w.id === `codefy-run-${id}`);
      if (existing) {
        app.shell.activateById(existing.id);
        return;
      }
      const widget = new MainAreaWidget({ content: new RunDetail(api, trans, id) });
      widget.id = `codefy-run-${id}`;
      widget.title.label = trans.__('Run %1', id.slice(0, 12));
      widget.title.icon = runsIcon;
      widget.title.closable = true;
      widget.content.title.changed.connect(() => {
        widget.title.label = widget.content.title.label;
      });
      app.shell.add(widget, 'main');
      app.shell.activateById(widget.id);
    };

    const runs = new RunsPanel({ api, trans, openRun });
    runs.title.icon = runsIcon;
    runs.title.caption = trans.__('Runs');
    const workers = new WorkersPanel(api, trans);
    workers.title.icon = workersIcon;
    workers.title.caption = trans.__('Workers');
    app.shell.add(runs, 'left', { rank: 600 });
    app.shell.add(workers, 'left', { rank: 601 });
    restorer?.add(runs, runs.id);
    restorer?.add(workers, workers.id);

    app.commands.addCommand(COMMANDS.openRuns, {
      label: trans.__('Show Runs'),
      caption: trans.__('The runs this server owns, live'),
      execute: () => app.shell.activateById(runs.id)
    });
    app.commands.addCommand(COMMANDS.openWorkers, {
      label: trans.__('Show Workers'),
      caption: trans.__('Worker agents, their devices and slots'),
      execute: () => app.shell.activateById(workers.id)
    });
    app.commands.addCommand(COMMANDS.openRun, {
      label: trans.__('Open Run Detail'),
      execute: args => openRun(String(args.id))
    });
    const category = trans.__('Codefy');
    palette?.addItem({ command: COMMANDS.openRuns, category });
    palette?.addItem({ command: COMMANDS.openWorkers, category });

    void app.restored.then(async () => {
      void workers.start();
      await runs.start();
      try {
        const page = await api.json<{ total: number }>(`${api.url('runs')}?status=queued,running,disconnected&limit=1`);
        if (page.total > 0) {
          Notification.info(
            page.total === 1 ? trans.__('1 run is in progress') : trans.__('%1 runs are in progress', page.total),
            {
              autoClose: 8000,
              actions: [{ label: trans.__('Show Runs'), callback: () => app.shell.activateById(runs.id) }]
            }
          );
        }
      } catch {
        // the panel shows the server's refusal itself
      }
    });
  }
};

export default plugin;
