import { z } from 'zod';
import { defineRoute, type RouteSpec } from '../http/route.js';
import type { Config } from '../environment.js';

const settings = z.object({
  map: z.object({
    tile_url: z
      .string()
      .nullable()
      .describe('URL template of the map tiles (`{z}`, `{x}`, `{y}`, maybe `{s}`), from MAP_TILE_URL; null: the console draws its bundled world outline'),
    attribution: z.string().describe('Credit the tile provider asks to be shown (MAP_TILE_ATTRIBUTION); "" when none'),
  }),
});

/** What the web console needs to know of this broker's settings; nothing secret. */
/** What the web console's settings route uses: the map settings. */
export interface WebConsoleRouteDeps {
  config: Pick<Config, 'mapTileUrl' | 'mapTileAttribution'>;
}

export const webConsoleRoutes: RouteSpec<WebConsoleRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/webconsole/settings',
    tag: 'web-console',
    summary: "Settings of this broker's web console",
    description:
      '`map.tile_url`: where the Map screen loads its tiles from (the MAP_TILE_URL setting), or null: the map then shows a bundled world outline and loads nothing from elsewhere; ' +
      '`map.attribution`: the credit shown on the map. Any signed-in user may read it.',
    access: 'authenticated',
    response: settings,
    handler: async ({ deps }) => ({ map: { tile_url: deps.config.mapTileUrl ?? null, attribution: deps.config.mapTileAttribution } }),
  }),
];
